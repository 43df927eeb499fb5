#!/usr/bin/env python3
"""Exports a small user backbone as TorchScript, with nexusd's documented signature:
forward(images uint8 [N,V,H,W,3], tokens int32 [N,T], token_mask bool [N,T])
  -> (tokens [N,L,D], pooled [N,D], mask [N,L]); int attributes image_size, max_views,
max_tokens, dim. `export_torchscript.py OUT.pt [--no-attributes]`."""
import sys

import torch


class PatchMeanBackbone(torch.nn.Module):
    image_size: int
    max_views: int
    max_tokens: int
    dim: int

    def __init__(self, with_attributes: bool = True):
        super().__init__()
        if with_attributes:
            self.image_size, self.max_views, self.max_tokens, self.dim = 32, 1, 16, 24
        torch.manual_seed(0)
        self.patch = torch.nn.Linear(8 * 8 * 3, 24)
        self.tok = torch.nn.Embedding(256, 24)

    def forward(self, images: torch.Tensor, tokens: torch.Tensor, token_mask: torch.Tensor):
        n, v = images.shape[0], images.shape[1]
        x = images.float() / 255.0
        x = x.reshape(n, v, 4, 8, 4, 8, 3).permute(0, 1, 2, 4, 3, 5, 6).reshape(n, v * 16, 8 * 8 * 3)
        seq = torch.cat([self.patch(x), self.tok(tokens.long())], 1)
        mask = torch.cat([torch.ones(n, v * 16, dtype=torch.bool), token_mask.to(torch.bool)], 1)
        pooled = (seq * mask.unsqueeze(-1).float()).sum(1) / mask.float().sum(1, keepdim=True)
        return seq, pooled, mask


class NoAttributes(torch.nn.Module):
    def forward(self, images: torch.Tensor, tokens: torch.Tensor, token_mask: torch.Tensor):
        return images.float(), images.float(), token_mask


if __name__ == "__main__":
    module = NoAttributes() if "--no-attributes" in sys.argv else PatchMeanBackbone()
    torch.jit.script(module).save(sys.argv[1])
