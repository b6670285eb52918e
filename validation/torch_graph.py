"""A divsim model rebuilt in PyTorch from the output file's `model` attribute (the graph divsim ran, as
JSON: docs/hdf5-schema.md), so a replay or a notebook runs the same network without knowing which model
type it is.

Each layer style maps to the torch module or function its documentation names (docs/models.md); layers
with parameters or buffers sit in the module tree under their divsim names, so the torch state_dict keys
are the /init/<layer>/<param> paths with dots. A layer's "tied" parameters are an earlier layer's tensor
(GPT-2's output head is its token embedding): the module's parameter is set to that tensor, as nanoGPT
ties them, so named_parameters() lists it once. The graph runs in divsim's order: activation 0 is the
input batch, each layer writes one new activation, the last is the logits.

Built from the documented semantics only (no divsim source is read).
"""
import json
import math

import torch
import torch.nn as nn


class Attention(nn.Module):
    """Multi-head self-attention core: qkv (B, T, 3C) -> (B, T, C), softmax(q k^T / sqrt(C/NH)) v."""

    def __init__(self, heads, causal):
        super().__init__()
        self.heads, self.causal = heads, causal

    def forward(self, qkv):
        B, T, C3 = qkv.shape
        C = C3 // 3
        q, k, v = qkv.split(C, dim=2)
        q, k, v = (t.reshape(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        att = q @ k.transpose(-2, -1) / math.sqrt(C // self.heads)
        if self.causal:
            att = att.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
        return (att.softmax(dim=-1) @ v).transpose(1, 2).reshape(B, T, C)


class PatchTokens(nn.Module):
    """(B, C, H, W) -> (B, 1+HW, C): positions as tokens, a class token first, position embeddings added."""

    def __init__(self, channels, tokens):
        super().__init__()
        self.cls_token = nn.Parameter(torch.zeros(1, 1, channels))
        self.pos_embed = nn.Parameter(torch.zeros(1, tokens, channels))

    def forward(self, x):
        x = x.flatten(2).transpose(1, 2)
        return torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1) + self.pos_embed


class Embedding(nn.Module):
    """(B, T) token ids -> (B, T, C): wte(ids) + wpe(positions), nanoGPT's embedding."""

    def __init__(self, vocab, positions, dim):
        super().__init__()
        self.wte = nn.Embedding(vocab, dim)
        self.wpe = nn.Embedding(positions, dim)

    def forward(self, ids):
        ids = ids.long()
        return self.wte(ids) + self.wpe(torch.arange(ids.shape[1]))


class Lambda(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *xs):
        return self.fn(*xs)


def _module(layer, input_shapes):
    style, o = layer["style"], layer["options"]
    shape = input_shapes[0]
    if style == "linear":
        return nn.Linear(shape[-1], int(o["out"]), bias=bool(o.get("bias", 1)))
    if style == "conv2d":
        return nn.Conv2d(shape[0], int(o["out"]), int(o["kernel"]), stride=int(o.get("stride", 1)),
                         padding=int(o.get("padding", 0)), bias=bool(o.get("bias", 1)))
    if style in ("batchnorm1d", "batchnorm2d"):
        cls = nn.BatchNorm1d if style == "batchnorm1d" else nn.BatchNorm2d
        return cls(shape[0], eps=o.get("eps", 1e-5), momentum=o.get("momentum", 0.1))
    if style == "layernorm":
        return nn.LayerNorm(shape[-1], eps=o.get("eps", 1e-5))
    if style == "relu":
        return nn.ReLU()
    if style == "gelu":
        return nn.GELU(approximate="tanh" if o.get("tanh", 0) else "none")
    if style == "dropout":
        return nn.Dropout(o["p"])
    if style == "add":
        return Lambda(lambda a, b: a + b)
    if style == "avgpool":
        return Lambda(lambda x: x.mean(dim=(2, 3)))
    if style == "attention":
        return Attention(int(o["heads"]), bool(o.get("causal", 0)))
    if style == "patch_tokens":
        return PatchTokens(shape[0], 1 + shape[1] * shape[2])
    if style == "class_token":
        return Lambda(lambda x: x[:, 0])
    if style == "embedding":
        return Embedding(int(o["vocab"]), shape[0], int(o["dim"]))
    raise ValueError(f"layer {layer['name']}: style {style} has no torch counterpart here")


class GraphModel(nn.Module):
    """The network of one divsim run. forward(x) takes samples flat or shaped; returns the logits."""

    def __init__(self, graph):
        super().__init__()
        self.graph = graph
        self.input_shape = tuple(graph["input"])
        shapes = {0: self.input_shape}
        self.stateless = nn.ModuleDict()  # parameterless layers (ReLU, add, ...), by position: no state_dict keys
        self._order = []                  # every layer's module, in graph order
        for n, layer in enumerate(graph["layers"]):
            m = _module(layer, [shapes[i] for i in layer["inputs"]])
            shapes[layer["output"]] = tuple(layer["output_shape"])
            self._order.append(m)
            tied = layer.get("tied", {})
            for param, key in tied.items():
                setattr(m, param, self.get_parameter(key))
            if layer["params"] or layer["buffers"] or tied:
                self._place(layer["name"], m)
            else:
                self.stateless[str(n)] = m

    def _place(self, name, module):
        """Registers `module` at the dotted path `name` (nested containers), for state_dict keys."""
        *path, leaf = name.split(".")
        parent = self
        for part in path:
            if part not in parent._modules:
                parent.add_module(part, nn.Module())
            parent = parent._modules[part]
        parent.add_module(leaf, module)

    def forward(self, x):
        acts = {0: x.reshape(x.shape[0], *self.input_shape)}
        for layer, op in zip(self.graph["layers"], self._order):
            acts[layer["output"]] = op(*(acts[i] for i in layer["inputs"]))
        return acts[self.graph["layers"][-1]["output"]]


def from_run(path):
    """The GraphModel of the run in HDF5 file `path`."""
    import h5py

    with h5py.File(path, "r") as f:
        text = f.attrs["model"]
    return GraphModel(json.loads(text.decode() if isinstance(text, bytes) else str(text)))


def styles(graph):
    return {layer["style"] for layer in graph["layers"]}
