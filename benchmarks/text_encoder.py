"""A MiniLM-sized text encoder written from a config with onnx.helper (random weights, nothing
fetched): 6 layers, hidden 384, 12 heads, feed-forward 1,536, LayerNorm and GELU, as
all-MiniLM-L6-v2's BERT is; and a model folder of it beside the tests' WordPiece tokenizer."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np


@dataclass(frozen=True)
class EncoderConfig:
    layers: int = 6
    hidden: int = 384
    heads: int = 12
    ffn: int = 1536
    vocab: int = 300
    positions: int = 512


def bert_like(config: EncoderConfig = EncoderConfig(), seed: int = 0):
    """``last_hidden_state [batch, sequence, hidden]`` of a post-LayerNorm BERT encoder."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    h, heads = config.hidden, config.heads
    inits = []

    def weight(name: str, *shape: int, scale: float = 0.05) -> str:
        inits.append(numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name))
        return name

    def const(name: str, value: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(value, name))
        return name

    node = helper.make_node
    nodes = [
        node("Shape", ["input_ids"], ["shape"]),
        node("Gather", ["shape", const("one", np.array(1, np.int64))], ["tokens"], axis=0),
        node("Range", [const("zero", np.array(0, np.int64)), "tokens", "one"], ["positions"]),
        node("Gather", [weight("word", config.vocab, h), "input_ids"], ["words"]),
        node("Gather", [weight("position", config.positions, h), "positions"], ["places"]),
        node("Gather", [weight("types", 2, h), "token_type_ids"], ["typed"]),
        node("Add", ["words", "places"], ["e0"]),
        node("Add", ["e0", "typed"], ["e1"]),
        node(
            "LayerNormalization",
            ["e1", const("g0", np.ones(h, np.float32)), const("b0", np.zeros(h, np.float32))],
            ["x0"],
            axis=-1,
            epsilon=1e-12,
        ),
        node("Cast", ["attention_mask"], ["maskf"], to=TensorProto.FLOAT),
        node("Sub", [const("onef", np.array(1.0, np.float32)), "maskf"], ["hidden_keys"]),
        node("Mul", ["hidden_keys", const("big", np.array(-1e4, np.float32))], ["bias0"]),
        node("Unsqueeze", ["bias0", const("axes12", np.array([1, 2], np.int64))], ["bias"]),
    ]
    split = const("split", np.array([0, 0, heads, h // heads], np.int64))
    merge = const("merge", np.array([0, 0, h], np.int64))
    scale = const("scale", np.array(1 / np.sqrt(h // heads), np.float32))
    half, root2 = const("half", np.array(0.5, np.float32)), const("root2", np.array(np.sqrt(2.0), np.float32))
    x = "x0"
    for i in range(config.layers):
        p = f"l{i}_"
        for part in ("q", "k", "v"):
            nodes += [
                node("MatMul", [x, weight(p + "w" + part, h, h)], [p + part + "0"]),
                node("Add", [p + part + "0", const(p + "b" + part, np.zeros(h, np.float32))], [p + part + "1"]),
                node("Reshape", [p + part + "1", split], [p + part + "2"]),
                node("Transpose", [p + part + "2"], [p + part], perm=[0, 2, 3, 1] if part == "k" else [0, 2, 1, 3]),
            ]
        nodes += [
            node("MatMul", [p + "q", p + "k"], [p + "s0"]),
            node("Mul", [p + "s0", scale], [p + "s1"]),
            node("Add", [p + "s1", "bias"], [p + "s2"]),
            node("Softmax", [p + "s2"], [p + "a"], axis=-1),
            node("MatMul", [p + "a", p + "v"], [p + "c0"]),
            node("Transpose", [p + "c0"], [p + "c1"], perm=[0, 2, 1, 3]),
            node("Reshape", [p + "c1", merge], [p + "c2"]),
            node("MatMul", [p + "c2", weight(p + "wo", h, h)], [p + "o"]),
            node("Add", [x, p + "o"], [p + "r1"]),
            node(
                "LayerNormalization",
                [p + "r1", const(p + "g1", np.ones(h, np.float32)), const(p + "n1", np.zeros(h, np.float32))],
                [p + "h1"],
                axis=-1,
                epsilon=1e-12,
            ),
            node("MatMul", [p + "h1", weight(p + "w1", h, config.ffn)], [p + "f0"]),
            node("Div", [p + "f0", root2], [p + "f1"]),
            node("Erf", [p + "f1"], [p + "f2"]),
            node("Add", [p + "f2", "onef"], [p + "f3"]),
            node("Mul", [p + "f0", p + "f3"], [p + "f4"]),
            node("Mul", [p + "f4", half], [p + "f5"]),
            node("MatMul", [p + "f5", weight(p + "w2", config.ffn, h)], [p + "f6"]),
            node("Add", [p + "h1", p + "f6"], [p + "r2"]),
            node(
                "LayerNormalization",
                [p + "r2", const(p + "g2", np.ones(h, np.float32)), const(p + "n2", np.zeros(h, np.float32))],
                [p + f"x{i + 1}"],
                axis=-1,
                epsilon=1e-12,
            ),
        ]
        x = p + f"x{i + 1}"
    nodes.append(node("Identity", [x], ["last_hidden_state"]))
    inputs = [
        helper.make_tensor_value_info(name, TensorProto.INT64, ["batch", "sequence"])
        for name in ("input_ids", "attention_mask", "token_type_ids")
    ]
    output = helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, ["batch", "sequence", h])
    graph = helper.make_graph(nodes, "bert_like", inputs, [output], initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def encoder_folder(path: Path, config: EncoderConfig = EncoderConfig()) -> Path:
    """A Hugging Face export's layout of :func:`bert_like`: ``onnx/model.onnx`` and ``tokenizer.json``."""
    from tests.text_models import tokenizer_json

    (path / "onnx").mkdir(parents=True, exist_ok=True)
    (path / "onnx" / "model.onnx").write_bytes(bert_like(config).SerializeToString())
    tokenizer_json(path / "tokenizer.json")
    return path
