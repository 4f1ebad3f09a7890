#!/usr/bin/env python3
"""The torchvision reference for zeroplan's layer-list executor (issue 37): one training step of
torchvision.models.resnet101(num_classes=10) in fp32, whose starting weights, images, loss and gradients
`zeroplan run --model resnet101 --init-from DIR/model.safetensors --save-grads OURS.safetensors` is checked against
(the comparison itself is bench/llama/hf_reference.py compare, which reads the same DIR layout).

  tv_reference.py --out DIR [--seed S] [--batch B] [--device auto|cuda|cpu]
      Builds the model from the seed on the CPU in fp32 (torchvision's own initialisation) and writes
        DIR/model.safetensors   its state_dict: parameters and the BatchNorm buffers (running_mean, running_var,
                                num_batches_tracked), torchvision's names
        DIR/cifar/              CIFAR-10's binary layout (a label byte, then the R, G and B 32x32 planes) holding
                                exactly B training images over data_batch_1..5.bin (so that the order in which a
                                loader draws them changes nothing) and B test images
        DIR/reference.json      the loss of the step and what was run
        DIR/grads.safetensors   every parameter's gradient in fp32, by torchvision's name
      The step: the B training images as DeepSpeed's CIFAR example feeds them (ToTensor, then Normalize with mean
      and std 0.5 per channel; no augmentation), the model in training mode (BatchNorm on the batch's statistics),
      the mean cross-entropy over the batch, TF32 off.

Then, with zeroplan's CPU backend (fp32, the reference implementation) on the same machine:
  zeroplan run --model resnet101 --backend cpu --data DIR/cifar --micro-batch B --steps 1 --warmup-steps 0 \\
      --init-from DIR/model.safetensors --save-grads DIR/ours.safetensors --report DIR/ours.json
  python3 bench/llama/hf_reference.py compare --ref DIR --ours DIR/ours.safetensors --loss LOSS
"""
import argparse
import json
import os
import sys


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--dtype", choices=("float32", "float64"), default="float32",
                    help="the step's arithmetic; float64 measures how far fp32 itself (torchvision's or ours) lands "
                         "from the exact step on these weights (the weights and images are the same either way)")
    a = ap.parse_args(argv)
    if a.batch < 1:
        ap.error(f"--batch {a.batch}: expected at least 1")

    import numpy as np
    import torch
    import torchvision
    from safetensors.torch import save_file

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    device = torch.device(("cuda" if torch.cuda.is_available() else "cpu") if a.device == "auto" else a.device)
    torch.manual_seed(a.seed)
    model = torchvision.models.resnet101(num_classes=10)  # built on the CPU: weights independent of the GPU
    os.makedirs(a.out, exist_ok=True)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, os.path.join(a.out, "model.safetensors"))

    rng = np.random.default_rng(a.seed)
    folder = os.path.join(a.out, "cifar")
    os.makedirs(folder, exist_ok=True)
    split = [a.batch // 5 + (1 if i < a.batch % 5 else 0) for i in range(5)]
    train_labels, train_pixels = [], []
    for i, count in enumerate(split + [a.batch]):
        name = f"data_batch_{i + 1}.bin" if i < 5 else "test_batch.bin"
        labels = rng.integers(0, 10, count, dtype=np.uint8)
        pixels = rng.integers(0, 256, (count, 3 * 32 * 32), dtype=np.uint8)
        with open(os.path.join(folder, name), "wb") as f:
            for label, image in zip(labels, pixels):
                f.write(bytes([label]) + image.tobytes())
        if i < 5:
            train_labels.append(labels)
            train_pixels.append(pixels)
    labels = torch.from_numpy(np.concatenate(train_labels).astype(np.int64)).to(device)
    x = torch.from_numpy(np.concatenate(train_pixels)).float().view(-1, 3, 32, 32) / 255.0
    x = ((x - 0.5) / 0.5).to(device)

    dtype = getattr(torch, a.dtype)
    model = model.to(device=device, dtype=dtype).train()
    x = x.to(dtype)
    loss = torch.nn.functional.cross_entropy(model(x), labels)
    loss.backward()
    grads = {name: p.grad.detach().float().cpu().contiguous() for name, p in model.named_parameters()}
    save_file(grads, os.path.join(a.out, "grads.safetensors"))
    reference = {"loss": loss.item(), "dtype": "fp32", "arithmetic": a.dtype, "model": "torchvision.models.resnet101(num_classes=10)",
                 "torch": torch.__version__, "torchvision": torchvision.__version__, "device": str(device),
                 "seed": a.seed, "batch": a.batch}
    with open(os.path.join(a.out, "reference.json"), "w") as f:
        json.dump(reference, f, indent=1)
    print(json.dumps(reference))
    return 0


if __name__ == "__main__":
    sys.exit(main())
