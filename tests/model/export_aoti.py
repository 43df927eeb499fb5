#!/usr/bin/env python3
"""Exports the same small user backbone as export_torchscript.py as an AOTInductor package
(torch.export, then torch._inductor.aoti_compile_and_package), N dynamic, with nexusd's geometry
in the package's metadata. `export_aoti.py OUT.pt2 [--no-metadata]`. Exits 3 where this PyTorch
has no AOTInductor packaging (Debian's 1.13): the caller then knows why."""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from export_torchscript import PatchMeanBackbone  # noqa: E402


def main(out: str, with_metadata: bool) -> int:
    if not hasattr(torch, "export") or not hasattr(torch._inductor, "aoti_compile_and_package"):
        print(f"torch {torch.__version__} has no AOTInductor packaging", file=sys.stderr)
        return 3
    module = PatchMeanBackbone().eval()
    n = torch.export.Dim("n", min=1, max=4096)
    example = (torch.zeros(2, 1, 32, 32, 3, dtype=torch.uint8), torch.zeros(2, 16, dtype=torch.int32),
               torch.ones(2, 16, dtype=torch.bool))
    program = torch.export.export(module, example, dynamic_shapes=({0: n}, {0: n}, {0: n}))
    metadata = {k: str(getattr(module, k)) for k in ("image_size", "max_views", "max_tokens", "dim")}
    configs = {"aot_inductor.metadata": metadata} if with_metadata else {}
    torch._inductor.aoti_compile_and_package(program, package_path=out, inductor_configs=configs)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], "--no-metadata" not in sys.argv))
