#!/usr/bin/python3
"""`zeroplan run --init-from` on a layer-list model against an independent NumPy reference (Debian's python3-numpy
and the safetensors package; no torch here).

A small convolutional network in the bundled description format (conv 3x3 -> BatchNorm -> ReLU -> adaptive average
pool -> flatten -> linear), its weights and BatchNorm running statistics written under torchvision's state_dict
names and layouts (conv weight [out, in, k, k], "bn1.running_mean", "bn1.num_batches_tracked"), and CIFAR-format
files of exactly one global batch (so that the order in which the loader draws them changes nothing). zeroplan
trains one step on the CPU backend from those weights (--init-from, --save-grads; --lr 1e-30, so that the weights stay)
and evaluates the test split with the running statistics (--eval); NumPy computes the same loss and gradients (training-mode BatchNorm: the
batch's biased variance, PyTorch's torch.nn.BatchNorm2d) and the evaluation loss (running statistics).

Tolerances: the loss within 1e-5 relative (fp32, as for the transformers check), every gradient within 1e-4
relative L2, the evaluation loss to the 4 decimals zeroplan prints it with.

usage: layer_list_reference.py ZEROPLAN_BINARY SCRATCH_DIR [STAGE]
"""
import json
import os
import re
import subprocess
import sys

import numpy as np
from safetensors.numpy import load_file, save_file

C_IN, C_OUT, K, CLASSES, BATCH, SIDE = 3, 4, 3, 10, 8, 32


def describe():
    conv = C_OUT * C_IN * K * K
    return {
        "name": "tiny-cnn",
        "input_shape": [C_IN, SIDE, SIDE],
        "input_elements_per_sample": C_IN * SIDE * SIDE,
        "layers": [
            {"name": "stem", "params": conv + 2 * C_OUT, "activation_elements_per_sample": 2 * C_OUT * SIDE * SIDE,
             "forward_flops_per_sample": 2 * conv * SIDE * SIDE, "largest_module_params": conv, "module_count": 2,
             "module_calls": 3, "small_module_params": 2 * C_OUT,
             "ops": [{"op": "conv2d", "name": "conv1", "input": "input", "output": "stem", "in_channels": C_IN,
                      "out_channels": C_OUT, "kernel": K, "stride": 1, "padding": 1, "dilation": 1, "groups": 1,
                      "bias": False},
                     {"op": "batch_norm", "name": "bn1", "input": "stem", "output": "stem", "channels": C_OUT,
                      "eps": 1e-5, "momentum": 0.1},
                     {"op": "relu", "input": "stem", "output": "stem"}]},
            {"name": "head", "params": CLASSES * C_OUT + CLASSES, "activation_elements_per_sample": C_OUT + CLASSES,
             "forward_flops_per_sample": 2 * CLASSES * C_OUT, "largest_module_params": CLASSES * C_OUT + CLASSES,
             "module_count": 1, "module_calls": 2, "small_module_params": CLASSES,
             "ops": [{"op": "adaptive_avg_pool2d", "input": "stem", "output": "head.pool"},
                     {"op": "flatten", "input": "head.pool", "output": "head.features"},
                     {"op": "linear", "name": "fc", "input": "head.features", "output": "logits",
                      "in_features": C_OUT, "out_features": CLASSES, "bias": True}]},
        ],
    }


def write_cifar(folder, rng):
    """CIFAR-10's binary layout: a label byte, then the red, green and blue 32x32 planes. The train split holds
    one global batch spread over its five files; the test split another (evaluation takes whole global batches)."""
    os.makedirs(folder, exist_ok=True)
    train = []
    for name, count in (("data_batch_1.bin", 2), ("data_batch_2.bin", 2), ("data_batch_3.bin", 2),
                        ("data_batch_4.bin", 1), ("data_batch_5.bin", 1), ("test_batch.bin", BATCH)):
        labels = rng.integers(0, CLASSES, count, dtype=np.uint8)
        pixels = rng.integers(0, 256, (count, C_IN * SIDE * SIDE), dtype=np.uint8)
        with open(os.path.join(folder, name), "wb") as f:
            for label, image in zip(labels, pixels):
                f.write(bytes([label]) + image.tobytes())
        if name != "test_batch.bin":
            train.append((labels, pixels))
    test = (labels, pixels)
    join = lambda parts: (np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]))
    return join(train), test


def images(pixels):
    # DeepSpeed's CIFAR example: ToTensor() then Normalize((0.5,) * 3, (0.5,) * 3), no augmentation.
    x = pixels.reshape(-1, C_IN, SIDE, SIDE).astype(np.float64) / 255.0
    return (x - 0.5) / 0.5


def conv_forward(x, w):
    n, _, h, wd = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    out = np.zeros((n, C_OUT, h, wd))
    for kh in range(K):
        for kw in range(K):
            out += np.einsum("nchw,oc->nohw", xp[:, :, kh:kh + h, kw:kw + wd], w[:, :, kh, kw])
    return out, xp


def forward(weights, x, labels, train):
    w, gamma, beta = weights["conv1.weight"], weights["bn1.weight"], weights["bn1.bias"]
    conv, xp = conv_forward(x, w)
    if train:
        mean, var = conv.mean(axis=(0, 2, 3)), conv.var(axis=(0, 2, 3))
    else:
        mean, var = weights["bn1.running_mean"], weights["bn1.running_var"]
    rstd = 1.0 / np.sqrt(var + 1e-5)
    xhat = (conv - mean[None, :, None, None]) * rstd[None, :, None, None]
    z = gamma[None, :, None, None] * xhat + beta[None, :, None, None]
    y = np.maximum(z, 0.0)
    feat = y.mean(axis=(2, 3))
    logits = feat @ weights["fc.weight"].T + weights["fc.bias"]
    shifted = logits - logits.max(axis=1, keepdims=True)
    logp = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    loss = -logp[np.arange(len(labels)), labels].mean()
    return loss, dict(xp=xp, xhat=xhat, rstd=rstd, z=z, y=y, feat=feat, logp=logp)


def gradients(weights, labels, s):
    n = len(labels)
    dlogits = np.exp(s["logp"])
    dlogits[np.arange(n), labels] -= 1.0
    dlogits /= n
    g = {"fc.weight": dlogits.T @ s["feat"], "fc.bias": dlogits.sum(axis=0)}
    dfeat = dlogits @ weights["fc.weight"]
    dy = np.broadcast_to(dfeat[:, :, None, None] / (SIDE * SIDE), s["y"].shape)
    dz = dy * (s["z"] > 0)
    g["bn1.weight"] = (dz * s["xhat"]).sum(axis=(0, 2, 3))
    g["bn1.bias"] = dz.sum(axis=(0, 2, 3))
    m = n * SIDE * SIDE
    gamma, rstd = weights["bn1.weight"], s["rstd"]
    dxhat = dz * gamma[None, :, None, None]
    dconv = (rstd[None, :, None, None] / m) * (m * dxhat - dxhat.sum(axis=(0, 2, 3))[None, :, None, None] -
                                               s["xhat"] * (dxhat * s["xhat"]).sum(axis=(0, 2, 3))[None, :, None, None])
    dw = np.zeros_like(weights["conv1.weight"])
    for kh in range(K):
        for kw in range(K):
            dw[:, :, kh, kw] = np.einsum("nohw,nchw->oc", dconv, s["xp"][:, :, kh:kh + SIDE, kw:kw + SIDE])
    g["conv1.weight"] = dw
    return g


def main():
    zeroplan, scratch = sys.argv[1], sys.argv[2]
    stage = sys.argv[3] if len(sys.argv) > 3 else "0"
    os.makedirs(scratch, exist_ok=True)
    rng = np.random.default_rng(20261128)
    (train_labels, train_pixels), (test_labels, test_pixels) = write_cifar(os.path.join(scratch, "cifar"), rng)
    model = os.path.join(scratch, "tiny-cnn.json")
    with open(model, "w") as f:
        json.dump(describe(), f)
    weights = {
        "conv1.weight": rng.normal(0.0, 0.3, (C_OUT, C_IN, K, K)),
        "bn1.weight": rng.uniform(0.5, 1.5, C_OUT),
        "bn1.bias": rng.normal(0.0, 0.1, C_OUT),
        "bn1.running_mean": rng.normal(0.0, 0.2, C_OUT),
        "bn1.running_var": rng.uniform(0.5, 2.0, C_OUT),
        "fc.weight": rng.normal(0.0, 0.5, (CLASSES, C_OUT)),
        "fc.bias": rng.normal(0.0, 0.1, CLASSES),
    }
    stored = {k: v.astype(np.float32) for k, v in weights.items()}
    stored["bn1.num_batches_tracked"] = np.array(0, dtype=np.int64)  # torchvision's state_dict has it
    weights = {k: v.astype(np.float32).astype(np.float64) for k, v in weights.items()}
    init = os.path.join(scratch, "model.safetensors")
    save_file(stored, init)
    grads_file, report = os.path.join(scratch, "grads.safetensors"), os.path.join(scratch, "report.json")
    command = [zeroplan, "run", "--model", model, "--backend", "cpu", "--data", os.path.join(scratch, "cifar"),
               "--micro-batch", str(BATCH), "--steps", "1", "--warmup-steps", "0", "--stage", stage, "--lr", "1e-30",
               "--init-from", init, "--save-grads", grads_file, "--report", report, "--eval"]
    r = subprocess.run(command, capture_output=True, text=True)
    if r.returncode != 0:
        print("FAILED: zeroplan exited", r.returncode, r.stdout[-2000:], r.stderr)
        return 1
    failures = 0
    loss, saved = forward(weights, images(train_pixels), train_labels.astype(np.int64), train=True)
    ours = json.load(open(report))["measured"]["loss"][0]
    rel = abs(ours - loss) / abs(loss)
    print(f"step 1 loss: zeroplan {ours:.9g}, NumPy {loss:.9g}, relative {rel:.2e} (tolerance 1e-5)")
    failures += rel > 1e-5
    expected = gradients(weights, train_labels.astype(np.int64), saved)
    got = load_file(grads_file)
    if sorted(got) != sorted(expected):
        print(f"FAILED: gradient tensors {sorted(got)}, expected {sorted(expected)}")
        return 1
    for name, g in expected.items():
        if got[name].shape != g.shape:
            print(f"FAILED: {name} has shape {got[name].shape}, expected {g.shape}")
            failures += 1
            continue
        rel = np.linalg.norm(got[name] - g) / np.linalg.norm(g)
        print(f"gradient {name:14s} relative L2 {rel:.2e} (tolerance 1e-4)")
        failures += rel > 1e-4
    # The evaluation runs after the step: --lr 1e-30 leaves the fp32 weights as they were (AdamW's decay is scaled by the
    # rate too), and the training forward moved the running statistics by momentum 0.1 towards the batch's mean
    # and unbiased variance (torch.nn.BatchNorm2d).
    m_count = BATCH * SIDE * SIDE
    conv, _ = conv_forward(images(train_pixels), weights["conv1.weight"])
    weights["bn1.running_mean"] = 0.9 * weights["bn1.running_mean"] + 0.1 * conv.mean(axis=(0, 2, 3))
    weights["bn1.running_var"] = 0.9 * weights["bn1.running_var"] + 0.1 * conv.var(axis=(0, 2, 3)) * m_count / (m_count - 1)
    eval_loss, _ = forward(weights, images(test_pixels), test_labels.astype(np.int64), train=False)
    m = re.search(r"test accuracy .*?; loss ([0-9.]+);", r.stdout)
    if not m:
        print("FAILED: no test accuracy line in\n" + r.stdout[-2000:])
        return 1
    print(f"evaluation loss (running statistics from the checkpoint): zeroplan {m.group(1)}, NumPy {eval_loss:.4f}")
    failures += m.group(1) != f"{eval_loss:.4f}"
    # Bad checkpoints: one line naming the file, the tensor and what was expected; exit 2, nothing written.
    bad_cases = (("bn1.running_var", None, "tensor bn1.running_var (expected shape [4]) is missing"),
                 ("conv1.weight", np.zeros((C_OUT, C_IN, 1, K * K), np.float32),
                  "tensor conv1.weight has shape [4, 3, 1, 9], this model expects [4, 3, 3, 3]"),
                 ("layer1.0.conv1.weight", np.zeros((4, 4, 1, 1), np.float32),
                  "tensor layer1.0.conv1.weight [4, 4, 1, 1] is not part of this model"))
    for name, value, expected in bad_cases:
        bad = dict(stored)
        if value is None:
            del bad[name]
        else:
            bad[name] = value
        path = os.path.join(scratch, "bad.safetensors")
        save_file(bad, path)
        written = os.path.join(scratch, "bad_grads.safetensors")
        command = [zeroplan, "run", "--model", model, "--backend", "cpu", "--steps", "1", "--init-from", path,
                   "--save-grads", written]
        r = subprocess.run(command, capture_output=True, text=True)
        line = r.stderr.strip()
        ok = r.returncode == 2 and "\n" not in line and expected in line and path in line and not os.path.exists(written)
        print(f"bad checkpoint ({name}): exit {r.returncode}: {line}")
        failures += not ok
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
