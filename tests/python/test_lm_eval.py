"""lm-evaluation-harness (`lm-eval`, its `local-completions` model) against
`svc serve` on the real default model (SmolLM2-135M-Instruct,
`$SVC_TEST_MODEL`): a loglikelihood task (multiple choice, which the harness
scores through `echo` and `logprobs` on `/v1/completions`) and a generation
task, end to end through its own command line.

Two things here stand in for what this machine cannot fetch: the tasks are
local (a YAML and a JSONL file each, written here; the harness's own tasks
download their datasets), and the tokenizer the harness counts the
context's tokens with is SmolLM2's, built from the GGUF's own vocabulary and
merges (transformers reads a GGUF's tokenizer only with torch). The test
checks first that this tokenizer splits the tasks' texts exactly as svc
does, since the harness cuts svc's token list where its own count says.
"""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
from pathlib import Path

import openai
import pytest

from conftest import Server, real_model_serve

CAPITALS = [
    {"question": "The capital of France is", "choices": ["Paris", "banana", "Tuesday"], "gold": 0},
    {"question": "The capital of Italy is", "choices": ["purple", "Rome", "seven"], "gold": 1},
    {"question": "The capital of Japan is", "choices": ["sandwich", "nineteen", "Tokyo"], "gold": 2},
]
ARITHMETIC = [
    {"question": "Question: What is 2 + 2?\nAnswer:", "answer": " 4"},
    {"question": "Question: What is the capital of France?\nAnswer:", "answer": " Paris"},
]


@pytest.fixture(scope="module")
def eval_server():
    yield from real_model_serve("svc-lm-eval-")


def smollm2_tokenizer(model: Path, out: Path) -> None:
    """Writes a transformers tokenizer folder for the GGUF `model` (a
    byte-level BPE of the `gpt2` kind, as SmolLM2's is) at `out`."""
    import gguf
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    reader = gguf.GGUFReader(str(model))

    def strings(key: str) -> list[str]:
        field = reader.fields[key]
        return [bytes(field.parts[i]).decode("utf-8") for i in field.data]

    def number(key: str) -> int:
        field = reader.fields[key]
        return int(field.parts[field.data[0]][0])

    assert bytes(reader.fields["tokenizer.ggml.model"].parts[-1]).decode() == "gpt2"
    tokens = strings("tokenizer.ggml.tokens")
    merges = [tuple(m.split(" ", 1)) for m in strings("tokenizer.ggml.merges")]
    bpe = models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges)
    tokenizer = Tokenizer(bpe)
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token=tokens[number("tokenizer.ggml.bos_token_id")],
        eos_token=tokens[number("tokenizer.ggml.eos_token_id")],
    ).save_pretrained(str(out))


def write_tasks(folder: Path) -> None:
    """Two local tasks: `svc_capitals` (multiple choice) and `svc_answers` (generation)."""
    (folder / "capitals.jsonl").write_text("".join(json.dumps(d) + "\n" for d in CAPITALS))
    (folder / "answers.jsonl").write_text("".join(json.dumps(d) + "\n" for d in ARITHMETIC))
    (folder / "svc_capitals.yaml").write_text(
        "task: svc_capitals\n"
        "dataset_path: json\n"
        f"dataset_kwargs:\n  data_files:\n    test: {folder / 'capitals.jsonl'}\n"
        "test_split: test\n"
        "output_type: multiple_choice\n"
        "doc_to_text: question\n"
        "doc_to_choice: choices\n"
        "doc_to_target: gold\n"
        "metric_list:\n  - metric: acc\n"
    )
    (folder / "svc_answers.yaml").write_text(
        "task: svc_answers\n"
        "dataset_path: json\n"
        f"dataset_kwargs:\n  data_files:\n    test: {folder / 'answers.jsonl'}\n"
        "test_split: test\n"
        "output_type: generate_until\n"
        "doc_to_text: question\n"
        "doc_to_target: answer\n"
        "generation_kwargs:\n  until: [\"\\n\"]\n  max_gen_toks: 8\n  do_sample: false\n"
        "metric_list:\n  - metric: exact_match\n"
    )


def svc_tokens(client: openai.OpenAI, text: str) -> list[str]:
    """The tokens svc splits `text` into (its scored echo)."""
    reply = client.completions.create(model="svc", prompt=text, echo=True, logprobs=0, max_tokens=0)
    return reply.choices[0].logprobs.tokens


def test_lm_evaluation_harness_scores_and_generates_through_svc(eval_server: Server, tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    client = openai.OpenAI(base_url=eval_server.base_url, api_key=eval_server.key, max_retries=0, timeout=300)
    tokenizer_dir = tmp_path / "tokenizer"
    smollm2_tokenizer(Path(os.environ["SVC_TEST_MODEL"]), tokenizer_dir)
    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    for doc in CAPITALS:
        for choice in doc["choices"]:
            text = f"{doc['question']} {choice}"
            ids = tokenizer(text, add_special_tokens=False).input_ids
            assert [tokenizer.decode([i]) for i in ids] == svc_tokens(client, text), text

    tasks = tmp_path / "tasks"
    tasks.mkdir()
    write_tasks(tasks)
    out = tmp_path / "out"
    model_args = ",".join([
        "model=svc",
        f"base_url={eval_server.base_url}/completions",
        f"tokenizer={tokenizer_dir}",
        "tokenizer_backend=huggingface",
        "tokenized_requests=False",
        "num_concurrent=1",
        "max_retries=1",
    ])
    env = {
        **os.environ,
        "OPENAI_API_KEY": eval_server.key,
        # Nothing from the hub: the tasks and the tokenizer are local.
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "HF_HOME": str(tmp_path / "hf"),
    }
    run = subprocess.run(
        [
            sys.executable, "-m", "lm_eval",
            "--model", "local-completions",
            "--model_args", model_args,
            "--tasks", "svc_capitals,svc_answers",
            "--include_path", str(tasks),
            "--output_path", str(out),
            "--log_samples",
            "--batch_size", "1",
        ],
        capture_output=True, text=True, env=env, timeout=900,
    )
    assert run.returncode == 0, f"lm_eval failed:\n{run.stdout}\n{run.stderr}"
    [results_file] = glob.glob(str(out / "**" / "results_*.json"), recursive=True)
    results = json.loads(Path(results_file).read_text())["results"]
    print("lm-eval results:", json.dumps(results, indent=1))
    capitals = results["svc_capitals"]
    # The model knows these capitals: each gold answer scores best.
    assert capitals["acc,none"] == 1.0, capitals
    assert "exact_match,none" in results["svc_answers"]

    # What the harness read is svc's own score of each continuation.
    [samples_file] = glob.glob(str(out / "**" / "samples_svc_capitals_*.jsonl"), recursive=True)
    first = json.loads(Path(samples_file).read_text().splitlines()[0])
    doc = first["doc"]
    context = svc_tokens(client, doc["question"])
    for choice, response in zip(doc["choices"], first["filtered_resps"], strict=True):
        scored = client.completions.create(
            model="svc", prompt=f"{doc['question']} {choice}", echo=True, logprobs=1, max_tokens=0,
        ).choices[0].logprobs
        expected = sum(scored.token_logprobs[len(context):])
        assert float(response[0]) == pytest.approx(expected, abs=1e-4), (choice, response, expected)
    # And the generation task's answers came from svc.
    [answers_file] = glob.glob(str(out / "**" / "samples_svc_answers_*.jsonl"), recursive=True)
    answers = [json.loads(line) for line in Path(answers_file).read_text().splitlines()]
    assert len(answers) == len(ARITHMETIC)
    assert all(isinstance(a["resps"][0][0], str) for a in answers), answers
