#!/usr/bin/env python3
"""Adds what each layer computes ("ops", core/layer_ops.h) to a ResNet layer-list description, in torchvision's
module names, so that `zeroplan run` executes the description itself: torchvision.models.resnet (v1.5: the stride on
the 3x3 convolution of a Bottleneck, models/resnet.py), stem conv1 7x7/2 + bn1 + relu + maxpool 3x3/2, stages of
Bottleneck blocks (conv1 1x1, bn1, relu, conv2 3x3 stride, bn2, relu, conv3 1x1 to 4x planes, bn3, downsample
conv 1x1 stride + bn on a stage's first block, add, relu), head avgpool + flatten + fc.

    python3 scripts/resnet_ops.py models/resnet101.json [--blocks 3,4,23,3] [--classes 10]

The file is rewritten in place; every aggregate field stays as it is, and each layer's ops must own exactly the
params the layer states (zeroplan checks it again when it reads the file).
"""
import argparse
import json
import sys


def conv(name, src, dst, cin, cout, k, stride=1, padding=0):
    return {"op": "conv2d", "name": name, "input": src, "output": dst, "in_channels": cin, "out_channels": cout,
            "kernel": k, "stride": stride, "padding": padding, "dilation": 1, "groups": 1, "bias": False}


def bn(name, tensor, channels):
    return {"op": "batch_norm", "name": name, "input": tensor, "output": tensor, "channels": channels, "eps": 1e-5,
            "momentum": 0.1}


def relu(tensor):
    return {"op": "relu", "input": tensor, "output": tensor}


def params(ops):
    n = 0
    for op in ops:
        if op["op"] == "conv2d":
            n += op["out_channels"] * op["in_channels"] // op["groups"] * op["kernel"] ** 2
        elif op["op"] == "batch_norm":
            n += 2 * op["channels"]
        elif op["op"] == "linear":
            n += op["out_features"] * op["in_features"] + (op["out_features"] if op["bias"] else 0)
    return n


def bottleneck(prefix, src, inplanes, planes, stride, downsample):
    t = lambda s: f"{prefix}.{s}"
    ops = [conv(t("conv1"), src, t("conv1"), inplanes, planes, 1), bn(t("bn1"), t("conv1"), planes), relu(t("conv1")),
           conv(t("conv2"), t("conv1"), t("conv2"), planes, planes, 3, stride, 1), bn(t("bn2"), t("conv2"), planes),
           relu(t("conv2")),
           conv(t("conv3"), t("conv2"), t("conv3"), planes, 4 * planes, 1), bn(t("bn3"), t("conv3"), 4 * planes)]
    identity = src
    if downsample:
        ops += [conv(t("downsample.0"), src, t("downsample"), inplanes, 4 * planes, 1, stride),
                bn(t("downsample.1"), t("downsample"), 4 * planes)]
        identity = t("downsample")
    ops += [{"op": "add", "inputs": [t("conv3"), identity], "output": t("out")}, relu(t("out"))]
    return ops, t("out")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("description")
    ap.add_argument("--blocks", default="3,4,23,3", help="Bottleneck blocks per stage (ResNet-101: 3,4,23,3)")
    ap.add_argument("--classes", type=int, default=10)
    a = ap.parse_args()
    with open(a.description) as f:
        doc = json.load(f)
    layers = {layer["name"]: layer for layer in doc["layers"]}
    made = {}
    made["stem"] = [conv("conv1", "input", "stem", 3, 64, 7, 2, 3), bn("bn1", "stem", 64), relu("stem"),
                    {"op": "max_pool2d", "input": "stem", "output": "stem.pool", "kernel": 3, "stride": 2, "padding": 1}]
    src, inplanes = "stem.pool", 64
    for stage, count in enumerate(int(b) for b in a.blocks.split(",")):
        planes = 64 * 2 ** stage
        for i in range(count):
            name = f"layer{stage + 1}.{i}"
            stride = 2 if stage > 0 and i == 0 else 1
            made[name], src = bottleneck(name, src, inplanes, planes, stride, i == 0)
            inplanes = 4 * planes
    made["head"] = [{"op": "adaptive_avg_pool2d", "input": src, "output": "head.pool"},
                    {"op": "flatten", "input": "head.pool", "output": "head.features"},
                    {"op": "linear", "name": "fc", "input": "head.features", "output": "logits",
                     "in_features": inplanes, "out_features": a.classes, "bias": True}]
    if sorted(made) != sorted(layers):
        sys.exit(f"{a.description}: layers {sorted(layers)} are not this ResNet's {sorted(made)}")
    for name, ops in made.items():
        if params(ops) != layers[name]["params"]:
            sys.exit(f"{a.description}: layer {name} states {layers[name]['params']} params, its ops own {params(ops)}")
        layers[name]["ops"] = ops
    doc["input_shape"] = [3, 32, 32]
    with open(a.description, "w") as f:
        json.dump(doc, f, indent=2)
        f.write("\n")
    print(f"{a.description}: ops for {len(made)} layers, {sum(params(o) for o in made.values()):,} params")


if __name__ == "__main__":
    main()
