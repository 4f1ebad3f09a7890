// core/json_input: parse errors with line and column, comments, and the integer rules (integral JSON numbers
// only, no silent truncation, no overflow), each error naming the file and the field.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/input_error.h"
#include "core/json_input.h"
#include "tests/core/input_error_expectations.h"

namespace zeroplan {
namespace {

const std::string kData = ZEROPLAN_TEST_DATA_DIR;

TEST(ReadJsonFile, MalformedJsonReportsFileLineAndColumn) {
  // malformed.json line 4 is `    "hidden": 768,,`: the second comma (column 19) is the error.
  expect_input_error([] { read_json_file(kData + "/malformed.json"); },
                     {"malformed.json", "malformed JSON at line 4, column 19", "unexpected ','"});
}

TEST(ReadJsonFile, MissingFileNamesThePath) {
  expect_input_error([] { read_json_file(kData + "/no_such_file.json"); }, {"no_such_file.json", "cannot open"});
}

TEST(ReadJsonFile, DirectoryIsNotAFile) {
  expect_input_error([] { read_json_file(kData); }, {"not a regular file"});
}

TEST(ReadJsonFile, CommentsOnlyWhenAllowed) {
  const std::string path = kData + "/ds_unknown_stage.json";  // starts with a // comment
  EXPECT_NO_THROW(read_json_file(path, /*allow_comments=*/true));
  expect_input_error([&] { read_json_file(path, /*allow_comments=*/false); },
                     {"ds_unknown_stage.json", "line 1, column 1", "comments are not allowed"});
}

// Issue 9: a file nested 100,000 levels deep crashed every recursive walk of the parsed document.
TEST(ReadJsonFile, NestingIsBoundedAndNamedWithItsPosition) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  expect_input_error([&] { parse_json_text(deep, "deep.json"); },
                     {"deep.json", "nested deeper than 100 levels", "line 1, column 101"});
  const std::string objects = "{\n" + [] {
    std::string text;
    for (int i = 0; i < 200; ++i) text += "{\"a\":";
    return text;
  }();
  expect_input_error([&] { parse_json_text(objects, "objects.json"); }, {"objects.json", "line 2"});
  // 100 levels are accepted; brackets inside strings and comments do not count.
  const std::string hundred = std::string(kMaxJsonDepth, '[') + std::string(kMaxJsonDepth, ']');
  EXPECT_TRUE(parse_json_text(hundred, "ok.json").is_array());
  const std::string quoted = "{\"text\": \"" + std::string(500, '[') + "\\\"\"} // " + std::string(500, '{');
  EXPECT_EQ(parse_json_text(quoted, "quoted.json", /*allow_comments=*/true).at("text").get<std::string>().size(), 501u);
}

TEST(JsonFields, IntegralFloatsAreIntegersButFractionsAreRefused) {
  const auto document = nlohmann::json::parse(R"({"a": 5e8, "b": 2.5, "c": 12})");
  const JsonFields fields(document, "cfg.json", "zero_optimization");
  EXPECT_EQ(fields.positive_integer("a"), 500'000'000);
  EXPECT_EQ(fields.positive_integer("c"), 12);
  expect_input_error([&] { fields.positive_integer("b"); },
                     {"cfg.json", "zero_optimization.b", "expected an integer, got 2.5"});
}

TEST(JsonFields, OverflowingIntegersAreRefused) {
  const auto document = nlohmann::json::parse(R"({"big": 1e30, "unsigned": 9223372036854775808, "max": 9223372036854775807})");
  const JsonFields fields(document, "m.json");
  expect_input_error([&] { fields.positive_integer("big"); }, {"m.json", "'big'", "overflows a 64-bit integer"});
  expect_input_error([&] { fields.positive_integer("unsigned"); }, {"'unsigned'", "overflows a 64-bit integer"});
  EXPECT_EQ(fields.positive_integer("max"), INT64_MAX);
}

TEST(JsonFields, SignAndZeroRules) {
  const auto document = nlohmann::json::parse(R"({"zero": 0, "negative": -3, "x": -0.5})");
  const JsonFields fields(document, "m.json");
  EXPECT_EQ(fields.non_negative_integer("zero"), 0);
  expect_input_error([&] { fields.positive_integer("zero"); }, {"'zero'", "positive integer", "got 0"});
  expect_input_error([&] { fields.non_negative_integer("negative"); }, {"'negative'", "got -3"});
  expect_input_error([&] { fields.non_negative_number("x"); }, {"'x'", "non-negative"});
  expect_input_error([&] { fields.positive_number("zero"); }, {"'zero'", "positive number"});
}

TEST(JsonFields, WrongTypesAreNamed) {
  const auto document = nlohmann::json::parse(R"({"s": "12", "b": true, "o": {"k": 1}})");
  const JsonFields fields(document, "m.json", "top");
  expect_input_error([&] { fields.positive_integer("s"); }, {"top.s", "a string"});
  expect_input_error([&] { fields.positive_integer("b"); }, {"top.b", "a boolean"});
  expect_input_error([&] { fields.string("o"); }, {"top.o", "expected a string"});
  expect_input_error([&] { fields.boolean("s"); }, {"top.s", "expected true or false"});
  EXPECT_EQ(fields.object("o").positive_integer("k"), 1);
  expect_input_error([&] { fields.object("o").positive_integer("missing"); }, {"top.o.missing", "missing"});
}

TEST(JsonFields, OptionalFieldsFallBackOnlyWhenAbsent) {
  const auto document = nlohmann::json::parse(R"({"present": -1})");
  const JsonFields fields(document, "m.json");
  EXPECT_EQ(fields.positive_integer_or("absent", 7), 7);
  EXPECT_EQ(fields.string_or("absent", "x"), "x");
  expect_input_error([&] { fields.positive_integer_or("present", 7); }, {"'present'"});
}

TEST(JsonFields, OneOfListsTheChoicesAndUnknownKeysAreFound) {
  const auto document = nlohmann::json::parse(R"({"device": "gpu", "extra": 1})");
  const JsonFields fields(document, "ds.json", "offload_param");
  expect_input_error([&] { fields.one_of("device", {"none", "cpu", "nvme"}); },
                     {"offload_param.device", "\"gpu\"", "none, cpu, nvme"});
  EXPECT_EQ(fields.unknown_keys({"device"}), std::vector<std::string>{"extra"});
}

TEST(JsonFields, NonObjectIsRefused) {
  const auto document = nlohmann::json::parse("[1, 2]");
  expect_input_error([&] { JsonFields fields(document, "list.json"); }, {"list.json", "expected a JSON object"});
}

}  // namespace
}  // namespace zeroplan
