"""Training loops users bring, small and deterministic: the model zoo of
issue 48 (item 5), run by python/tests/test_zoo.py and bench/torch_zoo.py.

Each loop is a function

    run(off=None, tracker=None, steps=N, wrap=None, **size) -> (losses, params)

that builds its model from a fixed seed and trains it for `steps` steps with
one torch thread, entering `tracker` (tracker.Tracker, first: outside) and
then `off` (chameleon.torch.Offload) around the loop, and calling
`off.step()` then `tracker.step()` at the end of each step. losses: every
loss the loop computed (training and evaluation, as Python floats); params:
the model's state_dict (parameters and buffers) after the loop, cloned.
wrap: None; "checkpoint" (torch.utils.checkpoint, use_reentrant=True, on
every block: LOOPS_WITH_BLOCKS) or "save_on_cpu" (saved tensors go to host
memory while the forward holds them: HostSavedTensors below).

The data are made inside the loop from a seeded torch.Generator; dropout
draws from torch's global generator, seeded at the start of run(): a glue
that neither draws random numbers nor replays random ops gives the same
masks, bit for bit.
"""
import contextlib
import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

__all__ = ["LOOPS", "LOOPS_WITH_BLOCKS", "HostSavedTensors"]


class HostSavedTensors(torch.autograd.graph.saved_tensors_hooks):
    """torch.autograd.graph.save_on_cpu() as it behaves on a GPU, on a
    machine whose device is the CPU: each tensor autograd saves is copied to
    host memory (a numpy array, which no torch storage holds) when the
    forward saves it and copied back into a new tensor when the backward
    unpacks it. (save_on_cpu itself is a no-op here: tensor.cpu() of a CPU
    tensor is the tensor.)"""

    def __init__(self):
        def pack(t):
            return t.dtype, t.requires_grad, t.detach().numpy().copy()

        def unpack(packed):
            dtype, _, arr = packed
            return torch.from_numpy(arr).to(dtype).clone()
        super().__init__(pack, unpack)


def _contexts(tracker, off):
    stack = contextlib.ExitStack()
    if tracker is not None:
        stack.enter_context(tracker)
    if off is not None:
        stack.enter_context(off)
    return stack


def _end_step(off, tracker):
    if off is not None:
        off.step()
    if tracker is not None:
        tracker.step()


def _watch(tracker, model, opts):
    """Tells a tracker.Tracker where the model state is (the floor's part)."""
    if tracker is not None and hasattr(tracker, "state_fn"):
        import tracker as tracker_mod
        tracker.state_fn = lambda: tracker_mod.state_tensors(model, opts)


def _saving(wrap):
    return HostSavedTensors() if wrap == "save_on_cpu" else contextlib.nullcontext()


def _blockwise(block, x, wrap):
    if wrap == "checkpoint":
        return checkpoint(block, x, use_reentrant=True)
    return block(x)


def _params(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _start(seed):
    torch.set_num_threads(1)
    torch.manual_seed(seed)
    return torch.Generator().manual_seed(seed + 1000)


# ---- (a) MLP with AdamW ---------------------------------------------------------

def mlp(off=None, tracker=None, steps=14, wrap=None, sizes=(64, 64, 64, 64, 10), batch=1024):
    """docs/pytorch.md's recipe on an MLP: Linear-ReLU layers, AdamW,
    zero_grad() (set_to_none=False in torch 1.13). Narrower than the issue's
    256-1024-1024-10 (time in make test) and deeper, with a large batch, so
    that activations, not AdamW's state, are most of the peak."""
    g = _start(1)
    layers = []
    for a, b in zip(sizes[:-2], sizes[1:-1]):
        layers += [nn.Linear(a, b), nn.ReLU()]
    model = nn.Sequential(*layers, nn.Linear(sizes[-2], sizes[-1]))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    _watch(tracker, model, [opt])
    losses = []
    with _contexts(tracker, off):
        for _ in range(steps):
            x = torch.randn(batch, sizes[0], generator=g)
            y = torch.randint(0, sizes[-1], (batch,), generator=g)
            with _saving(wrap):
                loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
            losses.append(loss.item())
            _end_step(off, tracker)
    return losses, _params(model)


# ---- (b) ResNet-style CNN, BatchNorm, SGD momentum, StepLR -----------------------

class _ResBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.b1 = nn.BatchNorm2d(cout)
        self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.b2 = nn.BatchNorm2d(cout)
        self.short = None
        if stride != 1 or cin != cout:
            self.short = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                       nn.BatchNorm2d(cout))

    def forward(self, x):
        y = F.relu(self.b1(self.c1(x)))
        y = self.b2(self.c2(y))
        return F.relu(y + (x if self.short is None else self.short(x)))


class _ResNet(nn.Module):
    def __init__(self, width=16, classes=10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, 1, 1, bias=False),
                                  nn.BatchNorm2d(width), nn.ReLU())
        self.blocks = nn.ModuleList([_ResBlock(width, width, 1), _ResBlock(width, width, 1),
                                     _ResBlock(width, 2 * width, 2),
                                     _ResBlock(2 * width, 2 * width, 1)])
        self.fc = nn.Linear(2 * width, classes)

    def forward(self, x, wrap=None):
        x = self.stem(x)
        for b in self.blocks:
            x = _blockwise(b, x, wrap)
        return self.fc(x.mean((2, 3)))


def cnn(off=None, tracker=None, steps=14, wrap=None, batch=16, image=16, width=16):
    """A ResNet-style CNN: BatchNorm (running statistics updated in place),
    SGD with momentum and weight decay, StepLR every 4 steps."""
    g = _start(2)
    model = _ResNet(width)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=4, gamma=0.5)
    return _classify(model, opt, sched, g, off, tracker, steps, wrap, batch, image)


def _classify(model, opt, sched, g, off, tracker, steps, wrap, batch, image,
              set_to_none=False, label_smoothing=0.0):
    """The image classifiers' loop (cnn, vit): random images and labels
    from g, cross entropy, zero_grad, backward, the optimizer's and the
    schedule's step."""
    _watch(tracker, model, [opt])
    losses = []
    with _contexts(tracker, off):
        for _ in range(steps):
            x = torch.randn(batch, 3, image, image, generator=g)
            y = torch.randint(0, 10, (batch,), generator=g)
            with _saving(wrap):
                loss = F.cross_entropy(model(x, wrap), y, label_smoothing=label_smoothing)
            opt.zero_grad(set_to_none=set_to_none)
            loss.backward()
            opt.step()
            sched.step()
            losses.append(loss.item())
            _end_step(off, tracker)
    return losses, _params(model)


# ---- (c) 2-layer LSTM with dropout, Adam --------------------------------------------

class _LSTMLM(nn.Module):
    def __init__(self, vocab, d, hidden):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.drop = nn.Dropout(0.2)
        self.lstm = nn.LSTM(d, hidden, num_layers=2, dropout=0.3, batch_first=True)
        self.out = nn.Linear(hidden, vocab)

    def forward(self, idx):
        h, _ = self.lstm(self.drop(self.emb(idx)))
        return self.out(self.drop(h))


def lstm(off=None, tracker=None, steps=12, wrap=None, vocab=64, d=32, hidden=64, seq=16,
         batch=16):
    """A 2-layer LSTM language model: dropout on the embeddings, between the
    layers (inside aten's lstm) and on the outputs; Adam."""
    g = _start(3)
    model = _LSTMLM(vocab, d, hidden)
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    _watch(tracker, model, [opt])
    losses = []
    with _contexts(tracker, off):
        for _ in range(steps):
            idx = torch.randint(0, vocab, (batch, seq + 1), generator=g)
            with _saving(wrap):
                logits = model(idx[:, :-1])
                loss = F.cross_entropy(logits.reshape(-1, vocab), idx[:, 1:].reshape(-1))
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
            _end_step(off, tracker)
    return losses, _params(model)


# ---- (d, e, f) a GPT-style LM -----------------------------------------------------

class _Block(nn.Module):
    def __init__(self, d, heads, dropout):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, 4 * d)
        self.fc2 = nn.Linear(4 * d, d)
        self.dropout = dropout

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(d // self.heads)
        mask = torch.ones(t, t, dtype=torch.bool).triu(1)
        att = F.softmax(att.masked_fill(mask, float("-inf")), dim=-1)
        att = F.dropout(att, self.dropout, self.training)
        y = (att @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(y)
        return x + self.fc2(F.gelu(self.fc(self.ln2(x))))


class _GPT(nn.Module):
    def __init__(self, vocab, d, heads, layers, seq, dropout):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.randn(seq, d) * 0.02)
        self.blocks = nn.ModuleList([_Block(d, heads, dropout) for _ in range(layers)])
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.head.weight = self.tok.weight          # tied input/output embeddings

    def forward(self, idx, targets, wrap=None):
        x = self.tok(idx) + self.pos[:idx.size(1)]
        for b in self.blocks:
            x = _blockwise(b, x, wrap)
        logits = self.head(self.ln(x))
        return F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))


def _tokens(g, batch, seq, vocab):
    idx = torch.randint(0, vocab, (batch, seq + 1), generator=g)
    return idx[:, :-1], idx[:, 1:]


def gpt(off=None, tracker=None, steps=12, wrap=None, vocab=64, d=32, heads=2, layers=2,
        seq=32, batch=4, accum=4, dropout=0.1, eval_every=5, foreach=False):
    """A GPT-style LM: tied embeddings, gradient accumulation over `accum`
    micro-batches, clip_grad_norm_, AdamW, a linear warmup (LambdaLR),
    zero_grad(set_to_none=True), a no_grad evaluation every `eval_every`
    steps. One step is one optimizer step. foreach: AdamW's (torch 2's
    default on GPUs: one op updates every parameter)."""
    g = _start(4)
    model = _GPT(vocab, d, heads, layers, seq, dropout)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01, foreach=foreach)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 4))
    _watch(tracker, model, [opt])
    losses = []
    with _contexts(tracker, off):
        held_out = _tokens(torch.Generator().manual_seed(99), batch, seq, vocab)
        for step in range(steps):
            for _ in range(accum):
                x, y = _tokens(g, batch, seq, vocab)
                with _saving(wrap):
                    loss = model(x, y, wrap) / accum
                loss.backward()
                losses.append(loss.item())
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            opt.zero_grad(set_to_none=True)
            if step % eval_every == eval_every - 1:
                model.eval()
                with torch.no_grad():
                    losses.append(model(*held_out).item())
                model.train()
            _end_step(off, tracker)
    return losses, _params(model)


def gpt_checkpoint(off=None, tracker=None, steps=12, wrap=None, **kw):
    """The LM with torch.utils.checkpoint (use_reentrant=True) on every
    block. (use_reentrant=False fails in backward under any dispatch mode
    in torch 1.13: a torch bug.)"""
    return gpt(off, tracker, steps, "checkpoint" if wrap is None else wrap, **kw)


def skip(off=None, tracker=None, steps=22, wrap=None, vocab=64, d=32, heads=2, layers=2,
         seq=32, batch=8, overflow_every=7, validate_every=10):
    """A transformer loop with dynamic loss scaling: the scaled loss's
    gradients are unscaled and checked; a simulated overflow (an inf in a
    gradient) every `overflow_every`-th step skips the optimizer step and
    halves the scale; the scale doubles after 3 good steps; a no_grad
    validation every `validate_every` steps; zero_grad() keeps the
    gradients (zeroed in place); AdamW(foreach=True): one op updates
    every parameter."""
    g = _start(5)
    model = _GPT(vocab, d, heads, layers, seq, 0.0)
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3, foreach=True)
    scale, good = 2.0 ** 10, 0
    _watch(tracker, model, [opt])
    losses = []
    with _contexts(tracker, off):
        held_out = _tokens(torch.Generator().manual_seed(98), batch, seq, vocab)
        for step in range(steps):
            x, y = _tokens(g, batch, seq, vocab)
            with _saving(wrap):
                loss = model(x, y, wrap)
            (loss * scale).backward()
            grads = [p.grad for p in model.parameters() if p.grad is not None]
            if step % overflow_every == overflow_every - 1:
                grads[step % len(grads)].view(-1)[0] = float("inf")
            for gr in grads:
                gr.div_(scale)
            finite = bool(torch.stack([torch.isfinite(gr).all() for gr in grads]).all())
            if finite:
                opt.step()
                good += 1
                if good == 3:
                    scale, good = scale * 2, 0
            else:
                scale, good = scale / 2, 0
            opt.zero_grad()
            losses.append(loss.item())
            if step % validate_every == validate_every - 1:
                with torch.no_grad():
                    losses.append(model(*held_out).item())
            _end_step(off, tracker)
    return losses, _params(model)


# ---- (g) a small ViT --------------------------------------------------------------

class _ViTBlock(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.n1 = nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, dropout=0.1, batch_first=True)
        self.n2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Dropout(0.1),
                                 nn.Linear(4 * d, d))

    def forward(self, x):
        h = self.n1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.n2(x))


class _ViT(nn.Module):
    def __init__(self, image, patch, d, heads, depth, classes=10):
        super().__init__()
        self.embed = nn.Conv2d(3, d, patch, stride=patch)
        self.cls = nn.Parameter(torch.zeros(1, 1, d))
        self.pos = nn.Parameter(torch.randn(1, (image // patch) ** 2 + 1, d) * 0.02)
        self.blocks = nn.ModuleList(_ViTBlock(d, heads) for _ in range(depth))
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, classes)

    def forward(self, x, wrap=None):
        x = self.embed(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
        for b in self.blocks:
            x = _blockwise(b, x, wrap)
        return self.head(self.norm(x)[:, 0])


def vit(off=None, tracker=None, steps=14, wrap=None, batch=16, image=32, patch=4, d=64,
        heads=4, depth=2):
    """A small ViT: a convolution as patch embedding, a class token,
    learned positions, pre-norm blocks with nn.MultiheadAttention and a
    GELU MLP, dropout; AdamW with two parameter groups (no weight decay on
    biases, norms and positions), a warmup and cosine schedule, label
    smoothing, zero_grad(set_to_none=True). (Written by a helper as a loop
    nobody on the project had written; it found no fault.)"""
    g = _start(6)
    model = _ViT(image, patch, d, heads, depth)
    named = list(model.named_parameters())
    decay = [p for n, p in named if p.ndim >= 2 and n != "pos"]
    rest = [p for n, p in named if not (p.ndim >= 2 and n != "pos")]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.05},
                             {"params": rest, "weight_decay": 0.0}], lr=1e-3)
    warm = 3
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: (s + 1) / warm if s < warm else
                                              0.5 * (1 + math.cos(math.pi * (s - warm) /
                                                                  (steps - warm))))
    return _classify(model, opt, sched, g, off, tracker, steps, wrap, batch, image,
                     set_to_none=True, label_smoothing=0.1)


LOOPS = {"mlp": mlp, "cnn": cnn, "lstm": lstm, "gpt": gpt, "gpt_checkpoint": gpt_checkpoint,
         "skip": skip, "vit": vit}
# Loops whose model has blocks that wrap="checkpoint" checkpoints.
LOOPS_WITH_BLOCKS = ("cnn", "gpt", "skip", "vit")
