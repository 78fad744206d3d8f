"""A small GPT in torch and the training loop the tests and the benchmark
share: token and position embeddings, pre-norm causal transformer blocks
(nn.TransformerEncoderLayer), a language-model head, AdamW."""
import contextlib

import torch
import torch.nn.functional as F
from torch import nn


class TinyGPT(nn.Module):
    def __init__(self, vocab=256, d=64, heads=4, layers=4, seq=64):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.randn(seq, d) * 0.02)
        block = nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.0, batch_first=True,
                                           norm_first=True)
        self.blocks = nn.TransformerEncoder(block, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab)

    def forward(self, idx, targets):
        t = idx.size(1)
        # Made each call (not a buffer): DDP would broadcast a buffer by
        # reading its storage outside any op (docs/pytorch.md, limits).
        mask = torch.triu(torch.full((t, t), float("-inf")), diagonal=1)
        x = self.tok(idx) + self.pos[:t]
        x = self.norm(self.blocks(x, mask=mask))
        logits = self.head(x)
        return F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))


def batches(seed, n, batch=8, seq=64, vocab=256):
    g = torch.Generator().manual_seed(seed)
    for _ in range(n):
        idx = torch.randint(0, vocab, (batch, seq + 1), generator=g)
        yield idx[:, :-1], idx[:, 1:]


def train(model, off=None, steps=50, skip_step=7, validate_every=10, seed=1, batch=8):
    """The loop: an optimizer step skipped at skip_step (an overflow, say),
    a validation forward every validate_every steps. Returns the losses."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    losses = []
    with off if off is not None else contextlib.nullcontext():
        for step, (x, y) in enumerate(batches(seed, steps, batch=batch)):
            loss = model(x, y)
            loss.backward()
            if step != skip_step:
                opt.step()
            opt.zero_grad()
            losses.append(loss.item())
            if validate_every and step % validate_every == validate_every - 1:
                with torch.no_grad():
                    losses.append(model(x, y).item())
            if off is not None:
                off.step()
    return losses


def make(seed=0, **kw):
    torch.manual_seed(seed)
    return TinyGPT(**kw)
