"""Export tiny Hugging Face transformers (real exporter output) into tests/fixtures/.

Runs in a separate environment with torch and transformers (not tpusim dependencies):

    python -m venv /tmp/torchenv && /tmp/torchenv/bin/pip install torch transformers onnx
    /tmp/torchenv/bin/python scripts/export_hf_fixtures.py [--out tests/fixtures]

Weights are transformers' seeded random initialisation (no download: the models are built from
a config). Both use the eager attention (``attn_implementation="eager"``: the MatMul / Softmax
graph a deployment export of BertModel / ViTModel has) and the TorchScript exporter at opset 17.

  bert_tiny_32.ts.onnx   BertModel(vocab 64, hidden 32, 2 layers, 2 heads, FFN 64, 32 tokens):
                         inputs input_ids, attention_mask, token_type_ids int64 (1, 32); outputs
                         last_hidden_state (1, 32, 32), pooler_output (1, 32)
  vit_tiny_32.ts.onnx    ViTModel(image 32x32, patch 8, hidden 32, 2 layers, 2 heads, FFN 64):
                         input pixel_values (1, 3, 32, 32), outputs last_hidden_state (1, 17, 32),
                         pooler_output (1, 32)

``--only STEM`` writes one fixture.
"""
from __future__ import annotations

import torch
from fixture_args import fixture_args
from transformers import BertConfig, BertModel, ViTConfig, ViTModel

SEQ = 32


def bert():
    cfg = BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=64, max_position_embeddings=64, attn_implementation="eager")
    ids = torch.randint(0, 64, (1, SEQ), generator=torch.Generator().manual_seed(1))
    mask = torch.ones((1, SEQ), dtype=torch.int64)
    mask[:, 20:] = 0
    types = torch.zeros((1, SEQ), dtype=torch.int64)
    return BertModel(cfg, add_pooling_layer=True), (ids, mask, types), \
        ["input_ids", "attention_mask", "token_type_ids"]


def vit():
    cfg = ViTConfig(image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                    intermediate_size=64, attn_implementation="eager")
    x = torch.rand((1, 3, 32, 32), generator=torch.Generator().manual_seed(1)) * 2 - 1
    return ViTModel(cfg, add_pooling_layer=True), (x,), ["pixel_values"]


class _Outputs(torch.nn.Module):
    """The model returning (last_hidden_state, pooler_output) as a tuple (keyword inputs in order)."""

    def __init__(self, model, names):
        super().__init__()
        self.model, self.names = model, names

    def forward(self, *args):
        out = self.model(**dict(zip(self.names, args)))
        return out.last_hidden_state, out.pooler_output


def main() -> None:
    a = fixture_args(__doc__)
    for stem, make in (("bert_tiny_32", bert), ("vit_tiny_32", vit)):
        if a.only not in (None, stem):
            continue
        torch.manual_seed(0)
        model, args, names = make()
        model.eval()
        path = a.out / f"{stem}.ts.onnx"
        torch.onnx.export(_Outputs(model, names), args, str(path), dynamo=False, opset_version=17,
                          input_names=names, output_names=["last_hidden_state", "pooler_output"])
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
