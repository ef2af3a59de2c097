"""A small BERT-like encoder written with onnx.helper and a WordPiece tokenizer trained with
``tokenizers`` on generated text, for the tests of text (nothing fetched from a hub)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

VOCAB, HIDDEN, POSITIONS = 300, 16, 512
WORDS = (
    "alpha",
    "beta",
    "gamma",
    "delta",
    "epsilon",
    "zeta",
    "eta",
    "theta",
    "iota",
    "kappa",
    "lambda",
    "mu",
    "nu",
    "xi",
    "omicron",
    "pi",
    "rho",
    "sigma",
    "tau",
    "upsilon",
    "phi",
    "chi",
    "psi",
    "omega",
    "river",
    "mountain",
    "forest",
    "ocean",
    "desert",
    "city",
    "village",
    "road",
    "bridge",
    "tower",
    "garden",
)


def corpus(count: int, seed: int = 0, median_words: float = 8.0, most_words: int = 120) -> list[str]:
    """``count`` texts of a log-normal number of words (a real corpus's spread), seeded."""
    rng = np.random.default_rng(seed)
    lengths = np.clip(rng.lognormal(np.log(median_words), 0.8, count).astype(int), 1, most_words)
    return [" ".join(rng.choice(WORDS, size=n)) for n in lengths]


def tokenizer_json(path: Path) -> Path:
    """A BERT-style WordPiece tokenizer trained on the corpus, saved as ``tokenizer.json``."""
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers import normalizers, pre_tokenizers, processors, trainers

    tokenizer = tokenizers.Tokenizer(tokenizers.models.WordPiece(unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    special = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tokenizer.train_from_iterator(
        corpus(500, seed=99), trainers.WordPieceTrainer(vocab_size=VOCAB, special_tokens=special)
    )
    cls, sep = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", cls), ("[SEP]", sep)]
    )
    tokenizer.save(str(path))
    return path


def encoder(token_types: bool = True, seed: int = 0, hidden: int = HIDDEN, ffn: int = 32):
    """``last_hidden_state [batch, tokens, hidden]``: token, position and type embeddings, one attention
    head that the mask keeps from the padding, and a feed-forward block, each with a residual."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)

    def weight(name, *shape):
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.3).astype(np.float32), name)

    inits = [weight("word", VOCAB, hidden), weight("position", POSITIONS, hidden), weight("wq", hidden, hidden),
             weight("wk", hidden, hidden), weight("wv", hidden, hidden), weight("w1", hidden, ffn),
             weight("w2", ffn, hidden)]  # fmt: skip
    consts = {
        "zero": np.array(0, np.int64), "one": np.array(1, np.int64), "axis1": np.array([1], np.int64),
        "scale": np.array(1 / np.sqrt(hidden), np.float32),
        "big": np.array(-1e4, np.float32), "onef": np.array(1.0, np.float32),
    }  # fmt: skip
    inits += [numpy_helper.from_array(value, name) for name, value in consts.items()]
    node = helper.make_node
    nodes = [
        node("Shape", ["input_ids"], ["shape"]),
        node("Gather", ["shape", "one"], ["tokens"], axis=0),
        node("Range", ["zero", "tokens", "one"], ["positions"]),
        node("Gather", ["word", "input_ids"], ["words"]),
        node("Gather", ["position", "positions"], ["places"]),
        node("Add", ["words", "places"], ["embedded0"]),
    ]
    inputs = [helper.make_tensor_value_info(name, TensorProto.INT64, ["batch", "sequence"])
              for name in ("input_ids", "attention_mask")]  # fmt: skip
    if token_types:
        inits.append(weight("types", 2, hidden))
        nodes += [node("Gather", ["types", "token_type_ids"], ["typed"]), node("Add", ["embedded0", "typed"], ["x"])]
        inputs.append(helper.make_tensor_value_info("token_type_ids", TensorProto.INT64, ["batch", "sequence"]))
    else:
        nodes.append(node("Identity", ["embedded0"], ["x"]))
    nodes += [
        node("MatMul", ["x", "wq"], ["q"]), node("MatMul", ["x", "wk"], ["k"]), node("MatMul", ["x", "wv"], ["v"]),
        node("Transpose", ["k"], ["kt"], perm=[0, 2, 1]),
        node("MatMul", ["q", "kt"], ["raw"]), node("Mul", ["raw", "scale"], ["scores0"]),
        node("Cast", ["attention_mask"], ["maskf"], to=TensorProto.FLOAT),
        node("Sub", ["onef", "maskf"], ["hidden_keys"]), node("Mul", ["hidden_keys", "big"], ["bias0"]),
        node("Unsqueeze", ["bias0", "axis1"], ["bias"]), node("Add", ["scores0", "bias"], ["scores"]),
        node("Softmax", ["scores"], ["attention"], axis=-1), node("MatMul", ["attention", "v"], ["context"]),
        node("Add", ["x", "context"], ["h1"]),
        node("MatMul", ["h1", "w1"], ["f1"]), node("Relu", ["f1"], ["f2"]), node("MatMul", ["f2", "w2"], ["f3"]),
        node("Add", ["h1", "f3"], ["last_hidden_state"]),
    ]  # fmt: skip
    output = helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, ["batch", "sequence", hidden])
    graph = helper.make_graph(nodes, "encoder", inputs, [output], initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def model_folder(
    path: Path, token_types: bool = True, pooling: str | None = None, hidden: int = HIDDEN, ffn: int = 32
) -> Path:
    """A Hugging Face export's layout: ``onnx/model.onnx``, ``tokenizer.json`` and, where
    ``pooling`` is given, sentence-transformers' ``1_Pooling/config.json``."""
    (path / "onnx").mkdir(parents=True, exist_ok=True)
    (path / "onnx" / "model.onnx").write_bytes(encoder(token_types, hidden=hidden, ffn=ffn).SerializeToString())
    tokenizer_json(path / "tokenizer.json")
    if pooling is not None:
        (path / "1_Pooling").mkdir(exist_ok=True)
        modes = {"pooling_mode_mean_tokens": pooling == "mean", "pooling_mode_cls_token": pooling == "cls"}
        (path / "1_Pooling" / "config.json").write_text(json.dumps({"word_embedding_dimension": HIDDEN, **modes}))
    return path


def alone(folder: Path, texts: list[str], pooling: str = "mean", normalize: bool = False, pairs=None):
    """Each text scored by itself, no padding, pooled in numpy: what every batched result must equal."""
    import onnxruntime as ort
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tokenizer.enable_truncation(512)
    session = ort.InferenceSession(str(folder / "onnx" / "model.onnx"), providers=["CPUExecutionProvider"])
    names = {arg.name for arg in session.get_inputs()}
    vectors = []
    for index, text in enumerate(texts):
        encoding = tokenizer.encode(text, pairs[index]) if pairs is not None else tokenizer.encode(text)
        feeds = {"input_ids": np.array([encoding.ids]), "attention_mask": np.array([encoding.attention_mask]),
                 "token_type_ids": np.array([encoding.type_ids])}  # fmt: skip
        hidden = session.run(None, {name: feeds[name] for name in names})[0][0]
        vector = {"mean": hidden.mean(axis=0), "cls": hidden[0], "last": hidden[-1], "none": hidden}[pooling]
        if normalize:
            vector = vector / max(np.linalg.norm(vector), 1e-12)
        vectors.append(vector)
    return np.stack(vectors)


def classifier_folder(path: Path, labels: tuple[str, ...] = ("negative", "neutral", "positive")) -> Path:
    """A text classifier as Hugging Face exports one: the encoder's first token's vector times a
    ``[hidden, classes]`` matrix (``logits``), and ``config.json``'s ``id2label``."""
    from onnx import TensorProto, helper, numpy_helper

    model = encoder()
    graph = model.graph
    weights = np.random.default_rng(7).standard_normal((HIDDEN, len(labels))).astype(np.float32)
    graph.initializer.extend([numpy_helper.from_array(weights, "head"), numpy_helper.from_array(np.array(0), "first")])
    graph.node.extend([
        helper.make_node("Gather", ["last_hidden_state", "first"], ["cls"], axis=1),
        helper.make_node("MatMul", ["cls", "head"], ["logits"]),
    ])  # fmt: skip
    del graph.output[:]
    graph.output.append(helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", len(labels)]))
    (path / "onnx").mkdir(parents=True, exist_ok=True)
    (path / "onnx" / "model.onnx").write_bytes(model.SerializeToString())
    tokenizer_json(path / "tokenizer.json")
    (path / "config.json").write_text(json.dumps({"id2label": {str(i): label for i, label in enumerate(labels)}}))
    return path
