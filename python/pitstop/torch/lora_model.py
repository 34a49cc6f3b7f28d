"""The frozen base model and LoRA adapters of the multi-LoRA trainer.

A small GPT-style transformer cut into layers that pipeline stages can hold
one by one: layer 0 is the token + position embedding, layers 1..n the
transformer blocks, layer n + 1 the final norm and the output head (the
loss is computed there). Base weights are frozen and a pure function of
(seed, layer index), so every rank can build any layer; moving a layer
still ships its weights (a real base model is loaded, not regenerated).

Adapters are LoRA pairs (A: r x d_in, B: d_out x r, B = 0 at start) on the
attention's qkv and output projections of every block; adapter k's initial
A is a pure function of (seed, k, layer).
"""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

LORA_TARGETS = ("qkv", "proj")


class LoraConfig:
    """Shapes and hyper-parameters; identical on every rank."""

    def __init__(self, vocab, d_model=64, heads=4, seq=32, blocks=8,
                 lora_rank=8, lora_alpha=16.0, lr=3e-3, micro_batch=4,
                 micro_batches=2, seed=0):
        if d_model % heads:
            raise ValueError("d_model %d: not a multiple of heads %d" %
                             (d_model, heads))
        if blocks < 1:
            raise ValueError("blocks: must be >= 1, got %d" % blocks)
        self.vocab, self.d_model, self.heads = vocab, d_model, heads
        self.seq, self.blocks = seq, blocks
        self.lora_rank, self.lora_alpha, self.lr = lora_rank, lora_alpha, lr
        self.micro_batch = micro_batch      # samples per micro-batch
        self.micro_batches = micro_batches  # per adapter per step
        self.seed = seed

    @property
    def n_layers(self):
        return self.blocks + 2

    def to_dict(self):
        return dict(self.__dict__)


def layer_costs(cfg):
    """Forward + backward multiply-adds per micro-batch of every layer."""
    d, t, b = cfg.d_model, cfg.seq, cfg.micro_batch
    embed = b * t * d
    block = b * (t * 12 * d * d + 2 * t * t * d) * 3
    head = b * t * d * cfg.vocab * 3
    return [float(embed)] + [float(block)] * cfg.blocks + [float(head)]


class Embed(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.tok = nn.Embedding(cfg.vocab, cfg.d_model)
        self.pos = nn.Embedding(cfg.seq, cfg.d_model)

    def forward(self, idx, lora=None):
        return self.tok(idx) + self.pos(torch.arange(idx.shape[1]))


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        d = cfg.d_model
        self.heads = cfg.heads
        self.scale = cfg.lora_alpha / cfg.lora_rank
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, 4 * d)
        self.fc2 = nn.Linear(4 * d, d)
        self.register_buffer(
            "mask", torch.tril(torch.ones(cfg.seq, cfg.seq)).bool(),
            persistent=False)

    def _lin(self, name, x, lora):
        y = getattr(self, name)(x)
        if lora is not None:
            a, b = lora[name + ".A"], lora[name + ".B"]
            y = y + (x @ a.t()) @ b.t() * self.scale
        return y

    def forward(self, x, lora=None):
        b, t, d = x.shape
        h = self.heads
        q, k, v = self._lin("qkv", self.ln1(x), lora).split(d, dim=2)
        q = q.view(b, t, h, d // h).transpose(1, 2)
        k = k.view(b, t, h, d // h).transpose(1, 2)
        v = v.view(b, t, h, d // h).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(d // h)
        att = att.masked_fill(~self.mask[:t, :t], float("-inf"))
        y = (att.softmax(-1) @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self._lin("proj", y, lora)
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class Head(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.ln = nn.LayerNorm(cfg.d_model)
        self.out = nn.Linear(cfg.d_model, cfg.vocab)

    def forward(self, x, lora=None):
        return self.out(self.ln(x))


def build_layer(cfg, index):
    """Layer `index` with its deterministic frozen base weights."""
    if not 0 <= index < cfg.n_layers:
        raise ValueError("layer %d: the model has %d layers" %
                         (index, cfg.n_layers))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.seed * 100003 + index)
        if index == 0:
            m = Embed(cfg)
        elif index == cfg.n_layers - 1:
            m = Head(cfg)
        else:
            m = Block(cfg)
    for p in m.parameters():
        p.requires_grad_(False)
    return m


def has_lora(cfg, index):
    return 1 <= index <= cfg.blocks


def lora_shapes(cfg):
    d, r = cfg.d_model, cfg.lora_rank
    return [("qkv.A", (r, d)), ("qkv.B", (3 * d, r)), ("proj.A", (r, d)),
            ("proj.B", (d, r))]


def init_lora(cfg, adapter, index):
    """Adapter `adapter`'s LoRA parameters of block `index` (ordered dict)."""
    g = torch.Generator().manual_seed(
        (cfg.seed * 7919 + adapter) * 1000003 + index)
    out = {}
    for name, shape in lora_shapes(cfg):
        if name.endswith(".A"):
            t = torch.randn(shape, generator=g) / math.sqrt(shape[1])
        else:
            t = torch.zeros(shape)
        out[name] = nn.Parameter(t)
    return out


class ShardedCorpus:
    """Each adapter's own training data: shard k of a token tensor.

    batch(adapter, step, mb) is a pure function of its arguments, so the
    first stage (inputs) and the last (targets) draw the same samples
    wherever they are, and a step replayed draws the same batch."""

    def __init__(self, tokens, n_adapters, cfg, seed=0):
        n = len(tokens) // n_adapters
        if n <= cfg.seq + 1:
            raise ValueError("corpus: %d tokens for %d adapters of sequence "
                             "%d" % (len(tokens), n_adapters, cfg.seq))
        self.shards = [tokens[k * n:(k + 1) * n] for k in range(n_adapters)]
        self.cfg = cfg
        self.seed = seed

    def batch(self, adapter, step, mb):
        cfg = self.cfg
        data = self.shards[adapter]
        g = torch.Generator().manual_seed(
            ((self.seed * 131 + adapter) * 1000003 + step) * 97 + mb)
        starts = torch.randint(len(data) - cfg.seq - 1, (cfg.micro_batch,),
                               generator=g)
        x = torch.stack([data[s:s + cfg.seq] for s in starts])
        y = torch.stack([data[s + 1:s + 1 + cfg.seq] for s in starts])
        return x, y
