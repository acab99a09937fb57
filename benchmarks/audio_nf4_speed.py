"""What `--quantize-audio-encoder` costs in speed: E2B's frozen audio encoder (random weights, bf16) on a
30 s clip, with its Linear layers in bf16 against NF4 (bitsandbytes, double quantization, bf16 compute).

Usage:
    .venv/bin/python benchmarks/audio_nf4_speed.py [--device cpu|cuda] [--seconds 30] [--repeat 5]

The encoder is built from `assets/gemma-3n-E2B-it.config.json`'s audio config (12 conformer blocks,
hidden 1,536: 681 M Linear parameters, 1.27 GiB in bf16, ~0.36 GiB in NF4). With LoRA on the language
model only (`--lora-targets language`) the encoder runs forward without a graph once per clip and
step, so its forward time is the whole cost. The NF4 copy is made the way the loader quantizes a
checkpoint (`bitsandbytes.nn.Params4bit` moved to the device), and on CPU it keeps the training
kernel (`pipeline.model.loading.disable_bnb_cpu_repacking`). Timings alternate bf16 / NF4 `--repeat`
times after one warm-up each and print the median wall-clock and process-CPU seconds per forward and
the NF4 / bf16 ratio, plus the weight bytes of each.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def build_encoder(device: str):
    """E2B's audio encoder with random weights in bf16 on `device`, in eval mode."""
    import torch
    from transformers import Gemma3nAudioConfig, Gemma3nAudioEncoder

    from pipeline.model.catalog import load_model_config

    audio = load_model_config("google/gemma-3n-E2B-it")["audio_config"]
    config = Gemma3nAudioConfig(**{k: v for k, v in audio.items() if k != "model_type"})
    torch.manual_seed(0)
    return Gemma3nAudioEncoder(config).to(device=device, dtype=torch.bfloat16).eval()


def quantize_linears(module, device: str) -> int:
    """Replace every `nn.Linear` under `module` by an NF4 `bitsandbytes.nn.Linear4bit` (in place); returns
    the number replaced."""
    import bitsandbytes as bnb
    import torch

    count = 0
    for name, child in list(module.named_children()):
        if isinstance(child, torch.nn.Linear):
            layer = bnb.nn.Linear4bit(child.in_features, child.out_features, bias=child.bias is not None,
                                      compute_dtype=torch.bfloat16, compress_statistics=True, quant_type="nf4")
            layer.weight = bnb.nn.Params4bit(child.weight.data.to("cpu"), requires_grad=False,
                                             compress_statistics=True, quant_type="nf4")
            if child.bias is not None:
                layer.bias = torch.nn.Parameter(child.bias.data, requires_grad=False)
            setattr(module, name, layer.to(device))
            count += 1
        else:
            count += quantize_linears(child, device)
    return count


def tensor_bytes(module) -> int:
    total = 0
    for tensor in list(module.parameters()) + list(module.buffers()):
        total += tensor.numel() * tensor.element_size()
        state = getattr(tensor, "quant_state", None)
        if state is not None and getattr(state, "absmax", None) is not None:
            total += state.absmax.numel() * state.absmax.element_size()
    return total


def timed_forward(encoder, features, mask, device: str) -> tuple[float, float]:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()
    wall, cpu = time.perf_counter(), time.process_time()
    with torch.no_grad():
        encoder(features, mask)
    if device == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - wall, time.process_time() - cpu


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--seconds", type=float, default=30.0, help="clip length (default 30 s, the worst case)")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    import torch

    from pipeline.model.loading import disable_bnb_cpu_repacking

    if args.device == "cuda" and not torch.cuda.is_available():
        print("--device cuda: no CUDA device is visible here.", file=sys.stderr)
        return 2
    bf16 = build_encoder(args.device)
    nf4 = build_encoder(args.device)
    nf4.load_state_dict(bf16.state_dict())
    replaced = quantize_linears(nf4, args.device)
    disable_bnb_cpu_repacking(nf4)
    frames = int(args.seconds * 100)
    generator = torch.Generator().manual_seed(0)
    features = torch.randn(1, frames, bf16.config.input_feat_size, generator=generator).to(args.device, torch.bfloat16)
    mask = torch.zeros(1, frames, dtype=torch.bool, device=args.device)  # False = a real frame (the encoder's convention)
    with torch.no_grad():
        ref = bf16(features, mask)[0].float()
        out = nf4(features, mask)[0].float()
    rel = float((out - ref).norm() / ref.norm())
    times = {"bf16": [], "nf4": []}
    for _ in range(args.repeat):
        for name, encoder in (("bf16", bf16), ("nf4", nf4)):
            times[name].append(timed_forward(encoder, features, mask, args.device))
    print(f"E2B audio encoder, {args.seconds:g} s clip ({frames} mel frames), {args.device}, torch threads "
          f"{torch.get_num_threads()}; {replaced} Linear layers in NF4")
    print(f"weights: bf16 {tensor_bytes(bf16) / 2**30:.2f} GiB, NF4 {tensor_bytes(nf4) / 2**30:.2f} GiB; "
          f"NF4 output differs from bf16 by {100 * rel:.1f} % (relative L2, random weights)")
    med = {name: (statistics.median(t[0] for t in ts), statistics.median(t[1] for t in ts)) for name, ts in times.items()}
    for name, (wall, cpu) in med.items():
        runs = ", ".join(f"{t[0]:.2f}" for t in times[name])
        print(f"{name:>5}: {wall:.2f} s wall, {cpu:.2f} s CPU per forward (median of {args.repeat}; runs {runs})")
    print(f"NF4 / bf16: {med['nf4'][0] / med['bf16'][0]:.2f}x wall, {med['nf4'][1] / med['bf16'][1]:.2f}x CPU time")
    return 0


if __name__ == "__main__":
    sys.exit(main())
