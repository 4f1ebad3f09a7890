// Checks of single numbers from the command line, the GUI and files, shared by every reader so that a NaN, an
// infinity, a negative rate or an absurd size is refused the same way everywhere (issue 9): one InputError naming
// the source (file or "command line"), the field (JSON path or flag) and what was expected.
#pragma once

#include <cstdint>
#include <string>

namespace zeroplan {

// Finite (not nan, not +-inf); returns the value.
double require_finite(double value, const std::string& source, const std::string& field);
// Finite and > 0 (a rate, a bandwidth, a learning rate that must move the weights).
double require_positive(double value, const std::string& source, const std::string& field);
// Finite and >= 0 (a weight decay, a clipping norm where 0 means off).
double require_non_negative(double value, const std::string& source, const std::string& field);
// An integer >= 1 (a count: micro-batch, sequence length, GPUs).
std::int64_t require_positive(std::int64_t value, const std::string& source, const std::string& field);
// An integer in [1, most]; `why` says where the bound comes from ("the simulator times every micro-step").
std::int64_t require_count_at_most(std::int64_t value, std::int64_t most, const std::string& source,
                                   const std::string& field, const std::string& why);

// Upper bounds of the training sizes, checked where they are read (flags, GUI, DeepSpeed config) and again by the
// simulator, so that no product of them overflows 64 bits and no timeline is sized beyond memory: tokens per step
// = tokens per micro-step (<= 2^30) * micro-steps (< 2^14) * GPUs (<= 2^17) < 2^61. Each is far above real training.
inline constexpr std::int64_t kMaxMicroBatch = std::int64_t{1} << 20;           // samples per GPU per micro-step
inline constexpr std::int64_t kMaxSeqLen = std::int64_t{1} << 24;               // tokens per sample
inline constexpr std::int64_t kMaxTokensPerMicroStep = std::int64_t{1} << 30;   // micro-batch * sequence
inline constexpr std::int64_t kMaxGradAccum = 10'000;                           // micro-steps per optimizer step
inline constexpr std::int64_t kMaxGpus = std::int64_t{1} << 17;                 // data-parallel degree
inline constexpr const char* kMaxGradAccumWhy = "the simulator times every micro-step of the optimizer step";
inline constexpr const char* kMaxSizeWhy = "larger sizes overflow the 64-bit byte and token counts";

// micro_batch * seq_len within kMaxTokensPerMicroStep (each already within its own bound); names both fields.
void require_tokens_per_micro_step(std::int64_t micro_batch, std::int64_t seq_len, const std::string& source,
                                   const std::string& fields);

}  // namespace zeroplan
