"""Write tests/data/hostile/cases.jsonl, the hand-written hostile corpus (issue 14).

Run from the repository root: ``python tools/hostile_corpus.py``. Each case is one refusal the
CLI must make by the contract in tests/conftest.py (Refusal); tests/cli/test_hostile_corpus.py
runs them all. Add a case here, regenerate, commit both.
"""

import json

with open("tests/data/tiny_llama_config.json", encoding="utf-8") as _f:
    T = json.load(_f)
cases = []


def add(id, argv, needle="", files=None):
    cases.append({"id": id, "argv": argv, "needle": needle, **({"files": files} if files else {})})


def cfg(**kw):
    d = {**T, **kw}
    return {"text": json.dumps({k: v for k, v in d.items() if v != "__drop__"})}


# ---- numbers on the command line, every command that takes them
NUM = {
    "nan": "nan",
    "NaN": "NaN",
    "inf": "inf",
    "-inf": "-inf",
    "Infinity": "Infinity",
    "huge": "1e400",
    "neg": "-3",
    "zero": "0",
    "text": "seven",
    "empty": "",
    "hex": "0x10",
    "unicode": "٣",
    "long": "9" * 5000,
    "space": "  ",
    "frac": "2.5",
    "comma": "1,000",
}
explain = ["explain", "--model", "gpt2", "--gpu", "24GiB"]
for flag in ["--micro-batch", "--seq-len", "--grad-accum", "--rank", "--tp", "--pp", "--gpus"]:
    for k in ["nan", "inf", "neg", "zero", "text", "empty", "long", "frac", "hex", "huge"]:
        add(f"explain{flag}={k}", [*explain, flag, NUM[k]])
for flag in ["--headroom", "--lora-dropout"]:
    for k in ["nan", "inf", "-inf", "neg", "text", "huge", "Infinity"]:
        add(f"explain{flag}={k}", [*explain, flag, NUM[k]])
for k in ["nan", "inf", "neg", "zero", "text", "huge", "long"]:
    add(f"explain-params={k}", ["explain", "--params", NUM[k], "--gpu", "24GiB"])
add("explain-params-1e20", ["explain", "--params", "1e20"], "absurd")
add("explain-price", [*explain, "--price", "2"], "does nothing")
add("explain-price-nan", [*explain, "--price", "nan"], "finite")
for flag, v in [
    ("--layers", "1000000000000"),
    ("--hidden", "1000000000"),
    ("--vocab", "1000000000000"),
    ("--heads", "0"),
    ("--trainable-params", "nan"),
]:
    add(f"raw{flag}={v}", ["explain", "--params", "7e9", flag, v])
add(
    "raw-heads-not-dividing",
    ["explain", "--params", "7e9", "--layers", "32", "--hidden", "4096", "--heads", "5"],
    "divisible",
)
add("raw-heads-without-hidden", ["explain", "--params", "7e9", "--heads", "8"], "--hidden")
add(
    "raw-trainable-over",
    ["explain", "--params", "7e9", "--trainable-params", "8e9", "--method", "lora"],
)
add("raw-and-model", ["explain", "--params", "7e9", "--model", "gpt2"], "not both")
add("raw-family", ["explain", "--params", "7e9", "--family", "llama"], "--family")
add("catalog-family", [*explain, "--family", "llama"], "does nothing")
add("seq-1e9", [*explain, "--seq-len", "1000000000"])
add("seq-over-context", [*explain, "--seq-len", "4096"], "context")
add("gpu-1e30GiB", ["explain", "--model", "gpt2", "--gpu", "1e30GiB"])
add("gpu-1e5TiB", ["explain", "--model", "gpt2", "--gpu", "100000TiB"], "no GPU")
add("gpu-1KiB", ["explain", "--model", "gpt2", "--gpu", "1KiB"])
add("gpu-0GB", ["explain", "--model", "gpt2", "--gpu", "0GB"])
add("gpu-negative", ["explain", "--model", "gpt2", "--gpu", "-24GiB"])
add("gpu-nan", ["explain", "--model", "gpt2", "--gpu", "nanGiB"])
add("gpu-inf", ["explain", "--model", "gpt2", "--gpu", "infGiB"])
add("gpu-empty", ["explain", "--model", "gpt2", "--gpu", ""])
add("gpu-long", ["explain", "--model", "gpt2", "--gpu", "x" * 100000])
add("gpu-unknown", ["explain", "--model", "gpt2", "--gpu", "rtx-9090"], "unknown GPU")
add("gpu-no-unit", ["explain", "--model", "gpt2", "--gpu", "24"])
add("model-empty", ["explain", "--model", ""])
add("model-long", ["explain", "--model", "m" * 100000])
add("model-nul", ["explain", "--model", "a\x00b"])
add("model-unknown", ["explain", "--model", "llama-9"], "unknown model")
add("model-tilde-user", ["explain", "--model", "~nosuchuser12345/config.json"])
add("method-long", [*explain, "--method", "z" * 100000])
add("recipe-long", [*explain, "--recipe", "z" * 100000])
add("optimizer-unknown", [*explain, "--optimizer", "adam9"], "unknown optimizer")
add("quant-full", [*explain, "--method", "full", "--quant", "nf4"])
add("zero-5", [*explain, "--zero", "5"])
add("lora-on-full", [*explain, "--rank", "8"], "LoRA")
add("fused-contradiction", [*explain, "--fused-ce", "--loss", "chunked"], "contradicts")
add("gpus-not-tp-multiple", [*explain, "--gpus", "3", "--tp", "2"], "multiple")

# ---- config.json, every way it can be wrong
bad_cfgs = {
    "nan-hidden": {"text": json.dumps(T).replace('"hidden_size": 64', '"hidden_size": NaN')},
    "inf-dropout": {
        "text": json.dumps({**T, "attention_dropout": 0.0}).replace(
            '"attention_dropout": 0.0', '"attention_dropout": Infinity'
        )
    },
    "neg-inf-vocab": {
        "text": json.dumps(T).replace('"vocab_size": 512', '"vocab_size": -Infinity')
    },
    "1e400": {"text": json.dumps(T).replace('"hidden_size": 64', '"hidden_size": 1e400')},
    "layers-1e12": cfg(num_hidden_layers=10**12),
    "hidden-1e9": cfg(hidden_size=10**9, num_attention_heads=1, num_key_value_heads=1),
    "vocab-1e12": cfg(vocab_size=10**12),
    "intermediate-1e12": cfg(intermediate_size=10**12),
    "heads-1e6": cfg(num_attention_heads=10**6),
    "context-1e15": cfg(max_position_embeddings=10**15),
    "no-model-type": cfg(model_type="__drop__"),
    "unknown-model-type": cfg(model_type="frobnicator"),
    "model-type-int": cfg(model_type=7),
    "model-type-list": cfg(model_type=["llama"]),
    "model-type-empty": cfg(model_type=""),
    "heads-not-dividing": cfg(num_attention_heads=5, num_key_value_heads=5),
    "kv-not-dividing": cfg(num_key_value_heads=3),
    "kv-zero": cfg(num_key_value_heads=0),
    "kv-over-heads": cfg(num_key_value_heads=8),
    "moe-k-over-experts": cfg(model_type="mixtral", num_local_experts=2, num_experts_per_tok=4),
    "moe-zero-experts": cfg(model_type="mixtral", num_local_experts=0),
    "moe-k-zero": cfg(model_type="mixtral", num_local_experts=4, num_experts_per_tok=0),
    "qwen-moe-step-zero": cfg(
        model_type="qwen3_moe",
        num_experts=4,
        num_experts_per_tok=2,
        moe_intermediate_size=32,
        decoder_sparse_step=0,
    ),
    "str-bool": cfg(tie_word_embeddings="false"),
    "int-bool": cfg(tie_word_embeddings=1),
    "str-int": cfg(hidden_size="64"),
    "float-int": cfg(hidden_size=64.5),
    "bool-int": cfg(hidden_size=True),
    "list-int": cfg(hidden_size=[64]),
    "dict-int": cfg(hidden_size={"a": 1}),
    "null-required": cfg(hidden_size=None),
    "neg-layers": cfg(num_hidden_layers=-2),
    "zero-layers": cfg(num_hidden_layers=0),
    "zero-vocab": cfg(vocab_size=0),
    "dropout-1.5": cfg(attention_dropout=1.5),
    "dropout-neg": cfg(attention_dropout=-0.1),
    "dropout-str": cfg(attention_dropout="0.1"),
    "act-int": cfg(hidden_act=3),
    "dup-key": {"text": '{"model_type": "llama", "model_type": "gpt2", "hidden_size": 64}'},
    "array-top": {"text": "[1, 2, 3]"},
    "string-top": {"text": '"llama"'},
    "number-top": {"text": "42"},
    "null-top": {"text": "null"},
    "truncated": {"text": json.dumps(T)[:40]},
    "trailing-garbage": {"text": json.dumps(T) + " xyz"},
    "deep-nesting": {"text": "[" * 100000 + "]" * 100000},
    "huge-int-digits": {"text": '{"model_type": "llama", "hidden_size": ' + "9" * 6000 + "}"},
    "binary": {"hex": "00ff10203040"},
    "latin1": {"hex": "7b226d6f64656c5f74797065223a20226c6c616de1227d"},
    "utf16": {"hex": "fffe7b0022006d006f00"},
    "empty": {"text": ""},
    "whitespace": {"text": "   \n\n  "},
    "multimodal": {"text": json.dumps({"model_type": "llava", "text_config": {}})},
    "t5-heads": {
        "text": json.dumps(
            {
                "model_type": "t5",
                "d_model": 64,
                "num_heads": 5,
                "num_layers": 2,
                "d_ff": 128,
                "vocab_size": 100,
            }
        )
    },
    "gpt2-heads": {
        "text": json.dumps(
            {"model_type": "gpt2", "n_embd": 64, "n_head": 5, "n_layer": 2, "vocab_size": 100}
        )
    },
    "family-contradiction": cfg(model_type="gpt2"),
}
#: the GLM-4.5 / MiniMax-M2 MoE readers (a small GLM-4.5-shaped config, one value made hostile)
GLM = {
    "model_type": "glm4_moe",
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_hidden_layers": 3,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "vocab_size": 1000,
    "n_routed_experts": 8,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 128,
    "first_k_dense_replace": 1,
    "n_shared_experts": 1,
}
for k, kw in {
    "glm-qk-norm-str": {"use_qk_norm": "yes"},
    "glm-dense-over-layers": {"first_k_dense_replace": 9},
    "glm-shared-neg": {"n_shared_experts": -1},
    "glm-experts-disagree": {"num_local_experts": 4},
    "glm-topk-over": {"num_experts_per_tok": 9},
    "minimax-experts-zero": {"model_type": "minimax_m2", "num_local_experts": 0},
    "solar-topk-float": {"model_type": "solar_open", "num_experts_per_tok": 1.5},
}.items():
    bad_cfgs[k] = {"text": json.dumps({**GLM, **kw})}
for k, f in bad_cfgs.items():
    argv = ["explain", "--model", "{tmp}/config.json", "--gpu", "24GiB"]
    if k == "family-contradiction":
        argv += ["--family", "llama"]
    add(f"config-{k}", argv, "", {"config.json": f})
    if k in (
        "nan-hidden",
        "layers-1e12",
        "no-model-type",
        "moe-k-over-experts",
        "binary",
        "deep-nesting",
    ):
        add(
            f"search-config-{k}",
            ["search", "--model", "{tmp}/config.json", "--gpu", "24GiB"],
            "",
            {"config.json": f},
        )
        add(f"fits-config-{k}", ["fits", "--models", "{tmp}/config.json"], "", {"config.json": f})
add(
    "config-family-unknown",
    ["explain", "--model", "{tmp}/config.json", "--family", "mamba"],
    "not a supported family",
    {"config.json": cfg(model_type="__drop__")},
)
add("config-is-folder", ["explain", "--model", "{tmp}/sub"], "", {"sub/readme.txt": {"text": "x"}})
add("config-missing", ["explain", "--model", "{tmp}/nope.json"], "no such")

# ---- search
S = ["search", "--model", "qwen2.5-0.5b", "--gpu", "rtx-4090"]
for flag in [
    "--target-batch",
    "--max-gpus",
    "--gpus-per-node",
    "--trials",
    "--seed",
    "--top",
    "--pick",
    "--lora-alpha",
]:
    for k in ["nan", "neg", "zero", "text", "huge", "frac"]:
        if flag == "--seed" and k == "zero":
            continue
        add(f"search{flag}={k}", [*S, flag, NUM[k]])
for k in ["nan", "inf", "neg", "zero", "text", "huge"]:
    add(f"search-tokens={k}", [*S, "--tokens", NUM[k]])
    if k != "zero":
        add(f"search-price={k}", [*S, "--price", NUM[k]])
for v in ["lots", "1e30GiB", "0GiB", "-5GiB", "nanGiB", "1KiB", "x" * 10000]:
    add(f"search-cpu-ram={v[:12]}", [*S, "--cpu-ram", v])
add("search-gpus-per-node", [*S, "--gpus", "4", "--gpus-per-node", "3"], "whole number of nodes")
add("search-max-over-gpus", [*S, "--gpus", "4", "--max-gpus", "8"], "do nothing")
add("search-storage-exhaustive", [*S, "--storage", "sqlite:///{tmp}/x.db"], "exhaustive")
add("search-trials-exhaustive", [*S, "--trials", "5"], "exhaustive")
add("search-seed-exhaustive", [*S, "--seed", "5"], "exhaustive")
add(
    "search-study-no-storage",
    [*S, "--strategy", "optuna", "--study-name", "x"],
    "without --storage",
)
add("search-storage-scheme", [*S, "--strategy", "optuna", "--storage", "mongodb://h/db"], "scheme")
add("search-storage-empty", [*S, "--strategy", "optuna", "--storage", ""])
add(
    "search-storage-memory",
    [*S, "--strategy", "optuna", "--storage", "sqlite:///:memory:"],
    "needs a file",
)
add(
    "search-storage-nofolder",
    [*S, "--strategy", "optuna", "--storage", "sqlite:///{tmp}/no/x.db"],
    "does not exist",
)
add("search-storage-folder", [*S, "--strategy", "optuna", "--storage", "sqlite:///{tmp}"], "folder")
add("search-storage-long", [*S, "--strategy", "optuna", "--storage", "postgresql://" + "h" * 5000])
add(
    "search-storage-badport",
    [*S, "--strategy", "optuna", "--storage", "postgresql://u@h:99999999/db"],
)
add(
    "search-storage-nohost",
    [*S, "--strategy", "optuna", "--storage", "postgresql:///db"],
    "no host",
)
add("search-strategy-unknown", [*S, "--strategy", "grid"], "unknown strategy")
add("search-json-top", [*S, "--json", "--top", "3"], "does nothing")
add("search-force-nothing", [*S, "--force"], "does nothing")
add("search-alpha-no-emit", [*S, "--lora-alpha", "16"], "launch files")
add(
    "search-alpha-full",
    [*S, "--method", "full", "--lora-alpha", "16", "--emit", "hf", "--out", "{tmp}/o"],
    "full",
)
add("search-out-no-emit", [*S, "--out", "{tmp}/o"], "needs --emit")
add("search-emit-no-out", [*S, "--emit", "hf"], "needs --out")
add("search-pick-no-emit", [*S, "--pick", "2"], "needs --emit")
add("search-emit-unknown", [*S, "--emit", "megatron", "--out", "{tmp}/o"], "unknown launch format")
add(
    "search-out-existing",
    [*S, "--emit", "hf", "--out", "{tmp}/run"],
    "not empty",
    {"run/train.py": {"text": "keep me"}},
)
add(
    "search-out-is-file",
    [*S, "--emit", "hf", "--out", "{tmp}/f"],
    "is a file",
    {"f": {"text": "x"}},
)
add(
    "search-csv-existing",
    [*S, "--csv", "{tmp}/front.csv"],
    "exists",
    {"front.csv": {"text": "a,b\n1,2\n"}},
)
add("search-csv-folder", [*S, "--csv", "{tmp}/d"], "folder", {"d/x": {"text": "x"}})
add("search-csv-nofolder", [*S, "--csv", "{tmp}/no/front.csv"], "does not exist")
add(
    "search-csv-twice-emit",
    [*S, "--csv", "{tmp}/front.csv", "--emit", "hf", "--out", "{tmp}/o"],
    "exists",
    {"front.csv": {"text": "x"}},
)
add("search-rank-by", [*S, "--rank-by", "beauty"])
add("search-no-model", ["search", "--gpu", "rtx-4090", "--bogus"])

# ---- fits
for k in ["nan", "neg", "zero", "text", "huge"]:
    add(f"fits-gpus={k}", ["fits", "--gpus", NUM[k]])
    add(f"fits-seq={k}", ["fits", "--seq-len", NUM[k]])
    add(f"fits-target={k}", ["fits", "--target-batch", NUM[k]])
add("fits-price", ["fits", "--price", "2"], "does nothing")
add("fits-family-no-models", ["fits", "--family", "llama"], "--models")
add("fits-unknown-model", ["fits", "--models", "gpt9"], "unknown model")
add("fits-cpu-ram", ["fits", "--cpu-ram", "1e30GiB"])

# ---- fleet files
POOL = "pools:\n  - name: h100\n    gpu: h100-sxm\n    count: 8\n"
JOB = "jobs:\n  - name: a\n    model: llama-3.2-1b\n    methods: [lora]\n    target_batch: 32\n    seq_len: 2048\n    tokens: 1e9\n"


def fleet(text):
    return {"fleet.yaml": {"text": text}}


fleet_bad = {
    "count-nan": POOL.replace("count: 8", "count: .nan") + JOB,
    "count-str": POOL.replace("count: 8", 'count: "8"') + JOB,
    "count-float": POOL.replace("count: 8", "count: 8.5") + JOB,
    "count-zero": POOL.replace("count: 8", "count: 0") + JOB,
    "count-huge": POOL.replace("count: 8", "count: 1000000000000") + JOB,
    "count-bool": POOL.replace("count: 8", "count: true") + JOB,
    "tokens-nan": POOL + JOB.replace("tokens: 1e9", "tokens: .nan"),
    "tokens-inf": POOL + JOB.replace("tokens: 1e9", "tokens: .inf"),
    "tokens-neg": POOL + JOB.replace("tokens: 1e9", "tokens: -5"),
    "tokens-text": POOL + JOB.replace("tokens: 1e9", "tokens: lots"),
    "tokens-huge": POOL + JOB.replace("tokens: 1e9", "tokens: 1e30"),
    "tokens-long": POOL + JOB.replace("tokens: 1e9", "tokens: " + "9" * 5000 + "B"),
    "seq-huge": POOL + JOB.replace("seq_len: 2048", "seq_len: 1000000000"),
    "seq-str": POOL + JOB.replace("seq_len: 2048", 'seq_len: "2048"'),
    "batch-zero": POOL + JOB.replace("target_batch: 32", "target_batch: 0"),
    "price-nan": POOL + "    usd_per_gpu_hour: .nan\n" + JOB,
    "price-inf": POOL + "    usd_per_gpu_hour: .inf\n" + JOB,
    "price-neg": POOL + "    usd_per_gpu_hour: -1\n" + JOB,
    "headroom-1": POOL + "    headroom: 1.0\n" + JOB,
    "gpn-not-dividing": POOL.replace("count: 8", "count: 12\n    gpus_per_node: 8") + JOB,
    "cpu-ram-huge": POOL + "    cpu_ram_per_node: 1e30GiB\n" + JOB,
    "cpu-ram-text": POOL + "    cpu_ram_per_node: plenty\n" + JOB,
    "gpu-size-only": POOL.replace("gpu: h100-sxm", "gpu: 80GiB") + JOB,
    "gpu-unknown": POOL.replace("gpu: h100-sxm", "gpu: h900") + JOB,
    "custom-gpu-mem": POOL.replace(
        "gpu: h100-sxm",
        "gpu: {name: x, memory: 1e30GiB, bf16_tflops: 100, bandwidth_gb_s: 1000}\n    usd_per_gpu_hour: 1",
    )
    + JOB,
    "custom-gpu-nan": POOL.replace(
        "gpu: h100-sxm",
        "gpu: {name: x, memory: 48GiB, bf16_tflops: .nan, bandwidth_gb_s: 1000}\n    usd_per_gpu_hour: 1",
    )
    + JOB,
    "custom-gpu-extra": POOL.replace(
        "gpu: h100-sxm",
        "gpu: {name: x, memory: 48GiB, bf16_tflops: 10, bandwidth_gb_s: 1000, colour: red}\n    usd_per_gpu_hour: 1",
    )
    + JOB,
    "unknown-field": POOL + "    colour: red\n" + JOB,
    "dup-pool": POOL + POOL.replace("pools:\n", "") + JOB,
    "job-pool-unknown": POOL + JOB + "    pools: [a100]\n",
    "model-unknown": POOL + JOB.replace("llama-3.2-1b", "llama-9"),
    "model-nul": POOL + JOB.replace("llama-3.2-1b", '"a\\0b"'),
    "model-long": POOL + JOB.replace("llama-3.2-1b", "m" * 10000),
    "methods-bad": POOL + JOB.replace("[lora]", "[magic]"),
    "methods-empty": POOL + JOB.replace("[lora]", "[]"),
    "seq-over-context": POOL + JOB.replace("seq_len: 2048", "seq_len: 1000000"),
    "no-jobs": POOL,
    "jobs-not-list": POOL + "jobs: 5\n",
    "pools-scalar": "pools: x\n" + JOB,
    "int-key": POOL + JOB + "1: x\n",
    "list-key": POOL + JOB + "? [a, b]\n: x\n",
    "python-tag": POOL + JOB + "title: !!python/object/apply:os.system ['echo pwned']\n",
    "python-name": "pools: !!python/name:os.system\n" + JOB,
    "alias-bomb": "a: &a [x,x,x,x,x,x,x,x,x,x]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b,*b]\nd: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c,*c]\ne: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d,*d]\nf: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e,*e]\ng: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f,*f]\nh: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g,*g]\ni: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h,*h]\npools: *i\njobs: *i\n",
    "alias-bomb-in-field": POOL
    + "a: &a [x,x,x,x,x,x,x,x,x,x]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b,*b]\nd: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c,*c]\ne: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d,*d]\nf: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e,*e]\ng: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f,*f]\nh: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g,*g]\n"
    + JOB.replace("tokens: 1e9", "tokens: *h"),
    "recursive-alias": "pools: &p [*p]\n" + JOB,
    "deep-nesting": "pools: " + "[" * 50000 + "]" * 50000 + "\n" + JOB,
    "tabs": "pools:\n\t- name: x\n" + JOB,
    "two-documents": POOL + JOB + "---\n" + POOL + JOB,
    "empty": "",
    "comment-only": "# nothing\n",
    "scalar": "42\n",
}
for k, text in fleet_bad.items():
    add(f"fleet-{k}", ["fleet", "{tmp}/fleet.yaml"], "", fleet(text))
add("fleet-binary", ["fleet", "{tmp}/fleet.yaml"], "binary", {"fleet.yaml": {"hex": "00010203ff"}})
add(
    "fleet-latin1",
    ["fleet", "{tmp}/fleet.yaml"],
    "UTF-8",
    {"fleet.yaml": {"hex": "706f6f6c733a20e90a"}},
)
add("fleet-missing", ["fleet", "{tmp}/nope.yaml"], "no such")
add("fleet-folder", ["fleet", "{tmp}"], "folder")
add("fleet-workers", ["fleet", "{tmp}/fleet.yaml", "--workers", "0"], "", fleet(POOL + JOB))
add(
    "fleet-force-no-report",
    ["fleet", "{tmp}/fleet.yaml", "--force"],
    "does nothing",
    fleet(POOL + JOB),
)
add(
    "fleet-report-exists",
    ["fleet", "{tmp}/fleet.yaml", "--report", "{tmp}/r.html"],
    "exists",
    {**fleet(POOL + JOB), "r.html": {"text": "<html>keep</html>"}},
)
add(
    "fleet-report-folder",
    ["fleet", "{tmp}/fleet.yaml", "--report", "{tmp}"],
    "folder",
    fleet(POOL + JOB),
)
add(
    "fleet-report-nofolder",
    ["fleet", "{tmp}/fleet.yaml", "--report", "{tmp}/no/r.html"],
    "does not exist",
    fleet(POOL + JOB),
)
add("fleet-solver", ["fleet", "{tmp}/fleet.yaml", "--solver", "magic"], "", fleet(POOL + JOB))

# ---- scenario files
for k in [
    "python-tag",
    "alias-bomb",
    "recursive-alias",
    "int-key",
    "scalar",
    "empty",
    "deep-nesting",
]:
    add(
        f"scenario-{k}", ["scenario", "run", "{tmp}/s.yaml"], "", {"s.yaml": {"text": fleet_bad[k]}}
    )
add(
    "scenario-binary",
    ["scenario", "run", "{tmp}/s.yaml"],
    "binary",
    {"s.yaml": {"hex": "7f454c4602010100"}},
)
add("scenario-elf-like", ["scenario", "run", "{tmp}/s.yaml"], "", {"s.yaml": {"hex": "7f454c46c3"}})
add("scenario-missing", ["scenario", "run", "{tmp}/none.yaml"], "no such scenario file")
add("scenario-folder", ["scenario", "run", "{tmp}"], "folder")
add(
    "scenario-no-cases",
    ["scenario", "run", "{tmp}/s.yaml"],
    "",
    {"s.yaml": {"text": "title: x\ncases: 5\n"}},
)
add(
    "scenario-unknown-kind",
    ["scenario", "run", "{tmp}/s.yaml"],
    "unknown kind",
    {"s.yaml": {"text": "title: x\ncases:\n  - name: a\n    kind: magic\n    expect: {}\n"}},
)
add("scenario-no-subcommand", ["scenario"], "subcommand")

# ---- launch plan files
PLAN = {
    "model": "qwen2.5-0.5b",
    "gpu": "rtx-4090",
    "config": {
        "method": "lora",
        "micro_batch": 1,
        "grad_accum": 8,
        "seq_len": 512,
        "dp": 1,
        "recipe": "bf16-torch",
    },
}


def plan(mut=None, text=None):
    if text is not None:
        return {"plan.json": {"text": text}}
    d = json.loads(json.dumps(PLAN))
    if mut:
        mut(d)
    return {"plan.json": {"text": json.dumps(d)}}


L = ["launch", "{tmp}/plan.json", "--emit", "hf", "--out", "{tmp}/out"]
plan_bad = {
    "nan": plan(text=json.dumps(PLAN).replace('"micro_batch": 1', '"micro_batch": NaN')),
    "str-int": plan(lambda d: d["config"].update(micro_batch="1")),
    "float-int": plan(lambda d: d["config"].update(micro_batch=1.5)),
    "zero-mb": plan(lambda d: d["config"].update(micro_batch=0)),
    "huge-mb": plan(lambda d: d["config"].update(micro_batch=10**12)),
    "str-bool": plan(lambda d: d["config"].update(optimizer_in_backward="true")),
    "unknown-knob": plan(lambda d: d["config"].update(warp_drive=1)),
    "missing-method": plan(lambda d: d["config"].pop("method")),
    "config-list": plan(lambda d: d.update(config=[1])),
    "model-int": plan(lambda d: d.update(model=5)),
    "model-unknown": plan(lambda d: d.update(model="llama-9")),
    "gpu-int": plan(lambda d: d.update(gpu=5)),
    "gpn-str": plan(lambda d: d.update(gpus_per_node="eight")),
    "gpn-zero": plan(lambda d: d.update(gpus_per_node=0)),
    "gpus-mismatch": plan(lambda d: d["config"].update(gpus=7)),
    "front-empty": plan(text=json.dumps({"front": []})),
    "front-not-list": plan(text=json.dumps({"front": 5})),
    "dup-key": plan(text='{"model": "a", "model": "b"}'),
    "array": plan(text="[]"),
    "truncated": plan(text=json.dumps(PLAN)[:30]),
    "binary": {"plan.json": {"hex": "0000ff"}},
    "empty": plan(text=""),
}
for k, files in plan_bad.items():
    add(f"launch-{k}", L, "", files)
add(
    "launch-pick-range",
    ["launch", "{tmp}/plan.json", "--emit", "hf", "--out", "{tmp}/out", "--pick", "5"],
    "out of range",
    plan(text=json.dumps({"front": [PLAN]})),
)
add(
    "launch-pick-single",
    ["launch", "{tmp}/plan.json", "--emit", "hf", "--out", "{tmp}/out", "--pick", "2"],
    "one plan",
    plan(),
)
add(
    "launch-pick-zero",
    ["launch", "{tmp}/plan.json", "--emit", "hf", "--out", "{tmp}/out", "--pick", "0"],
    "",
    plan(),
)
add("launch-alpha-zero", [*L, "--lora-alpha", "0"], "", plan())
add("launch-alpha-nan", [*L, "--lora-alpha", "nan"], "", plan())
add("launch-out-existing", L, "not empty", {**plan(), "out/train.py": {"text": "mine"}})
add(
    "launch-out-file",
    ["launch", "{tmp}/plan.json", "--emit", "hf", "--out", "{tmp}/plan.json"],
    "is a file",
    plan(),
)
add(
    "launch-out-under-file",
    ["launch", "{tmp}/plan.json", "--emit", "hf", "--out", "{tmp}/plan.json/sub"],
    "",
    plan(),
)
add("launch-missing", L, "no such")
add("launch-gpn", [*L, "--gpus-per-node", "0"], "", plan())
add(
    "launch-alpha-full",
    [*L, "--lora-alpha", "8"],
    "full",
    plan(lambda d: d["config"].update(method="full")),
)

# ---- accuracy CSVs
add("accuracy-binary", ["accuracy", "{tmp}/x.csv"], "binary", {"x.csv": {"hex": "0001020304"}})
add(
    "accuracy-latin1",
    ["accuracy", "{tmp}/x.csv"],
    "UTF-8",
    {"x.csv": {"hex": "69642c6d6f64656c0ae92c780a"}},
)
add("accuracy-empty", ["accuracy", "{tmp}/x.csv"], "empty", {"x.csv": {"text": ""}})
add("accuracy-no-columns", ["accuracy", "{tmp}/x.csv"], "column", {"x.csv": {"text": "a,b\n1,2\n"}})
add("accuracy-folder", ["accuracy", "{tmp}"], "folder")
add("accuracy-missing", ["accuracy", "{tmp}/none.csv"], "no such")
add("accuracy-nul-field", ["accuracy", "{tmp}/x.csv"], "", {"x.csv": {"text": "a,b\n1,\x002\n"}})

# ---- measure / autotune / trace: refused before torch runs anything
M = ["measure", "--model", "{tmp}/config.json", "--device", "cpu"]
add("measure-steps-zero", ["measure", "--model", "gpt2", "--steps", "0"])
add("measure-steps-nan", ["measure", "--model", "gpt2", "--steps", "nan"])
add("measure-config-nan", M, "NaN", {"config.json": bad_cfgs["nan-hidden"]})
add("measure-config-notype", M, "model_type", {"config.json": bad_cfgs["no-model-type"]})
add(
    "measure-json-bad-header",
    M[:3]
    + ["gpt2", "--device", "cpu", "--json", "{tmp}/rows.csv"][0:0]
    + ["--json", "{tmp}/rows.csv"],
    "other columns",
    {"config.json": {"text": json.dumps(T)}, "rows.csv": {"text": "a,b\n1,2"}},
)
add(
    "measure-json-binary",
    [*M, "--json", "{tmp}/rows.csv"],
    "binary",
    {"config.json": {"text": json.dumps(T)}, "rows.csv": {"hex": "00ff00ff"}},
)
add(
    "measure-json-folder",
    [*M, "--json", "{tmp}"],
    "folder",
    {"config.json": {"text": json.dumps(T)}},
)
add("measure-price", ["measure", "--model", "gpt2", "--price", "2"], "does nothing")
add("autotune-trials-zero", ["autotune", "--model", "gpt2", "--trials", "0"])
add("autotune-cpu-ram", ["autotune", "--model", "gpt2", "--cpu-ram", "64GiB"], "does nothing")
add("autotune-storage", ["autotune", "--model", "gpt2", "--storage", "mongodb://x"], "")
add("autotune-candidates", ["autotune", "--model", "gpt2", "--candidates", "-1"])
add("trace-layers-zero", ["trace", "gpt2", "--layers", "0"])
add("trace-layers-huge", ["trace", "gpt2", "--layers", "100000"])
add("trace-seq-nan", ["trace", "gpt2", "--seq-len", "nan"])
add("trace-batch-neg", ["trace", "gpt2", "--batch", "-1"])
add(
    "trace-config-bomb",
    ["trace", "{tmp}/config.json"],
    "",
    {"config.json": bad_cfgs["layers-1e12"]},
)

# ---- the parser itself
add("no-such-command", ["frobnicate"])
add("unknown-flag", ["explain", "--model", "gpt2", "--warp", "9"], "unrecognized")
add("long-unknown-flag", ["explain", "--" + "x" * 100000])
add("models-extra", ["models", "--bogus"])
add("gpus-extra", ["gpus", "extra"])

# ---- second pass: check's config values, serve, max, trace-step, explain's layouts ----
AX = "base_model: meta-llama/Llama-3.1-8B\n"
G = ["--gpu", "a100-80gb", "--model", "llama-3.1-8b"]
TT = "model:\n  _component_: torchtune.models.llama3_1.lora_llama3_1_8b\n"
add(
    "check-deep-json",
    ["check", "{tmp}/deep.json", "--gpu", "a100-80gb"],
    "nested too deeply",
    {"deep.json": {"text": "[" * 50000 + "]" * 50000}},
)
add(
    "check-axolotl-nan-rank",
    ["check", "{tmp}/a.yaml", *G],
    "lora_r must be a whole number",
    {"a.yaml": {"text": AX + "adapter: lora\nlora_r: .nan\nmicro_batch_size: 2\n"}},
)
add(
    "check-axolotl-inf-mb",
    ["check", "{tmp}/a.yaml", *G],
    "micro_batch_size must be a whole number",
    {"a.yaml": {"text": AX + "micro_batch_size: .inf\n"}},
)
add(
    "check-axolotl-text-mb",
    ["check", "{tmp}/a.yaml", *G],
    "a.yaml:2: micro_batch_size",
    {"a.yaml": {"text": AX + "micro_batch_size: lots\n"}},
)
add(
    "check-axolotl-list-seq",
    ["check", "{tmp}/a.yaml", *G],
    "sequence_len must be a whole number",
    {"a.yaml": {"text": AX + "sequence_len: [1, 2]\n"}},
)
add(
    "check-axolotl-mapping-rank",
    ["check", "{tmp}/a.yaml", *G],
    "lora_r must be a number, got a mapping",
    {"a.yaml": {"text": AX + "adapter: lora\nlora_r:\n  a: 1\n"}},
)
add(
    "check-llamafactory-mapping-dropout",
    ["check", "{tmp}/a.yaml", *G],
    "lora_dropout must be a number, got a mapping",
    {
        "a.yaml": {
            "text": "model_name_or_path: meta-llama/Meta-Llama-3-8B-Instruct\n"
            "stage: sft\nfinetuning_type: lora\nlora_dropout:\n  p: 0.1\n"
        }
    },
)
add(
    "check-axolotl-neg-rank",
    ["check", "{tmp}/a.yaml", *G],
    "lora_r -16 must be positive",
    {"a.yaml": {"text": AX + "adapter: lora\nlora_r: -16\n"}},
)
add(
    "check-axolotl-huge-mb",
    ["check", "{tmp}/a.yaml", *G],
    "absurdly large",
    {"a.yaml": {"text": AX + "micro_batch_size: 100000000000000000000000000\n"}},
)
add(
    "check-axolotl-bool-accum",
    ["check", "{tmp}/a.yaml", *G],
    "gradient_accumulation_steps must be a whole number",
    {"a.yaml": {"text": AX + "gradient_accumulation_steps: true\n"}},
)
add(
    "check-axolotl-dropout-2",
    ["check", "{tmp}/a.yaml", *G],
    "lora_dropout must be a probability",
    {"a.yaml": {"text": AX + "adapter: lora\nlora_dropout: 2\n"}},
)
add(
    "check-axolotl-float-seq",
    ["check", "{tmp}/a.yaml", *G],
    "sequence_len must be a whole number",
    {"a.yaml": {"text": AX + "sequence_len: 2048.5\n"}},
)
add(
    "check-deepspeed-stage-7",
    ["check", "{tmp}/ds.json", *G],
    "zero_optimization.stage 7",
    {"ds.json": {"text": '{"zero_optimization": {"stage": 7}}'}},
)
add(
    "check-deepspeed-neg-mb",
    ["check", "{tmp}/ds.json", *G],
    "train_micro_batch_size_per_gpu -2",
    {"ds.json": {"text": '{"train_micro_batch_size_per_gpu": -2}'}},
)
add(
    "check-deepspeed-nan",
    ["check", "{tmp}/ds.json", *G],
    "NaN is not a number",
    {"ds.json": {"text": '{"train_micro_batch_size_per_gpu": NaN}'}},
)
add(
    "check-torchtune-rank-0",
    ["check", "{tmp}/tt.yaml", *G],
    "model.lora_rank 0 must be positive",
    {"tt.yaml": {"text": TT + "  lora_rank: 0\nbatch_size: 2\n"}},
)
add(
    "check-torchtune-neg-batch",
    ["check", "{tmp}/tt.yaml", *G],
    "batch_size -1 must be positive",
    {"tt.yaml": {"text": TT + "  lora_rank: 8\nbatch_size: -1\n"}},
)
#: a training config has an optimizer (a torchtune file without one is refused as non-training)
TT_OPT = "optimizer:\n  _component_: torch.optim.AdamW\n"
add(
    "check-torchtune-attn-modules-number",
    ["check", "{tmp}/tt.yaml", *G],
    "model.lora_attn_modules must be a list of module names",
    {"tt.yaml": {"text": TT + "  lora_rank: 8\n  lora_attn_modules: 2\nbatch_size: 2\n" + TT_OPT}},
)
add(
    "check-torchtune-sharded-layers-nested",
    ["check", "{tmp}/tt.yaml", *G],
    "custom_sharded_layers must be a list of module names",
    {
        "tt.yaml": {
            "text": TT
            + "  lora_rank: 8\nbatch_size: 2\ncustom_sharded_layers:\n- [output]\n"
            + TT_OPT
        }
    },
)
add(
    "check-peft-r-text",
    ["check", "{tmp}/adapter_config.json", *G],
    "must be a whole number",
    {
        "adapter_config.json": {
            "text": '{"peft_type": "LORA", "r": "sixteen", "target_modules": ["q_proj"]}'
        }
    },
)
add(
    "check-trainer-neg-accum",
    ["check", "{tmp}/args.json", *G],
    "gradient_accumulation_steps 0 must be positive",
    {
        "args.json": {
            "text": '{"per_device_train_batch_size": 2, "gradient_accumulation_steps": 0, "output_dir": "x"}'
        }
    },
)
add("check-binary", ["check", "{tmp}/a.yaml", *G], "binary", {"a.yaml": {"hex": "fffe00ff"}})
add("check-missing", ["check", "{tmp}/nope.yaml", *G], "no such file")
for _id, _flag, _value in (
    ("check-headroom-2", "--headroom", "2"),
    ("check-gpus-0", "--gpus", "0"),
    ("check-gpu-unknown", "--gpu", "no-such-card"),
    ("check-top-nan", "--top", "nan"),
):
    _argv = ["check", "{tmp}/a.yaml", "--gpu", "a100-80gb", _flag, _value]
    if _flag == "--gpu":
        _argv = ["check", "{tmp}/a.yaml", "--gpu", _value]
    add(_id, _argv, "", {"a.yaml": {"text": AX}})
S = ["serve", "--model", "llama-3.1-8b", "--gpu", "h100-sxm"]
for _flag, _value in (
    ("--context", "0"),
    ("--context", "1e20"),
    ("--concurrency", "-1"),
    ("--concurrency", "nan"),
    ("--tp", "0"),
    ("--tp", "3"),
    ("--weights", "wat"),
    ("--gpu-memory-utilization", "0"),
    ("--gpu-memory-utilization", "1.5"),
    ("--max-num-batched-tokens", "-1"),
    ("--max-num-seqs", "0"),
    ("--context", "abc"),
    ("--kv-cache-dtype", "wat"),
    ("--block-size", "0"),
    ("--block-size", "17"),
    ("--block-size", "4096"),
):
    add(f"serve{_flag}={_value}", [*S, _flag, _value])
add("serve-gpu-unknown", ["serve", "--model", "llama-3.1-8b", "--gpu", "wat"])
add(
    "serve-binary-config",
    ["serve", "--model", "{tmp}/config.json", "--gpu", "h100-sxm"],
    "",
    {"config.json": {"hex": "fffe00ff"}},
)
add(
    "serve-heads-mismatch",
    ["serve", "--model", "{tmp}/config.json", "--gpu", "h100-sxm"],
    "",
    {
        "config.json": {
            "text": json.dumps(
                {
                    "model_type": "llama",
                    "hidden_size": 4096,
                    "num_attention_heads": 30,
                    "num_hidden_layers": 32,
                    "vocab_size": 32000,
                    "intermediate_size": 11008,
                }
            )
        }
    },
)
X = ["max", "--model", "llama-3.1-8b", "--gpu", "a100-80gb"]
for _flag, _value in (
    ("--seq-len", "0"),
    ("--target-batch", "-1"),
    ("--max-gpus", "0"),
    ("--gpu", "wat"),
    ("--model", "no-such-model"),
    ("--seq-len", "nan"),
):
    add(f"max{_flag}={_value}", [*X, _flag, _value])
TS = ["trace-step", "--model", "llama-3.1-8b", "--gpu", "a100-80gb"]
for _flag, _value in (
    ("--micro-batch", "0"),
    ("--seq-len", "-1"),
    ("--tp", "0"),
    ("--pp", "nan"),
    ("--virtual-stages", "0"),
    ("--rank", "-1"),
    ("--model", "no-such-model"),
    ("--optimizer", "wat"),
    ("--quant", "wat"),
):
    add(f"trace-step{_flag}={_value}", [*TS, _flag, _value])
E = ["explain", "--model", "llama-3.1-8b", "--gpu", "a100-80gb"]
add("explain-tp-3-heads", [*E, "--tp", "3"], "must divide the attention heads")
add("explain-pp-5-layers", [*E, "--pp", "5"], "must divide the layers")
add("explain-virtual-stages-no-pp", [*E, "--virtual-stages", "4"], "--virtual-stages does nothing")
add("explain-tp-overlap-no-tp", [*E, "--tp-comm-overlap"], "--tp-comm-overlap does nothing")
add("explain-fp8-recipe-no-fp8", [*E, "--fp8-recipe", "rowwise"], "--fp8-recipe does nothing")
add(
    "explain-zero3-single", [*E, "--zero", "3", "--backend", "single"], "single has no ZeRO stage 3"
)
add(
    "explain-8bit-offload",
    [*E, "--zero", "2", "--offload", "optimizer", "--optimizer", "adamw-8bit", "--gpus", "2"],
    "8-bit bitsandbytes optimizers",
)

# ---- third pass: a section that must be a mapping holds a scalar (fuzzed: 5 of 750 mutated
# check fixtures reached a reader's .get on an int/str: exit 70 before the fix)
ACC = "distributed_type: {kind}\nnum_processes: 2\nmixed_precision: bf16\n"
for _kind, _key in (("FSDP", "fsdp_config"), ("DEEPSPEED", "deepspeed_config")):
    for _label, _value in (
        ("int", "9223372036854775808"),
        ("text", "full_shard"),
        ("list", "[1, 2]"),
    ):
        add(
            f"check-accelerate-{_key}-{_label}",
            ["check", "{tmp}/acc.yaml", *G],
            f"acc.yaml:4: {_key} must be a mapping",
            {"acc.yaml": {"text": ACC.format(kind=_kind) + f"{_key}: {_value}\n"}},
        )
TT = "model:\n  _component_: torchtune.models.llama3_2.lora_llama3_2_1b\n  lora_rank: 8\n"
add(
    "check-torchtune-optimizer-number",
    ["check", "{tmp}/tt.yaml", *G],
    "tt.yaml:4: optimizer must be a mapping",
    {"tt.yaml": {"text": TT + "optimizer: 0.5\nbatch_size: 2\n"}},
)
add(
    "check-axolotl-fsdp-config-text",
    ["check", "{tmp}/a.yaml", *G],
    "fsdp_config must be a mapping",
    {"a.yaml": {"text": AX + "fsdp_version: 2\nfsdp_config: full_shard\n"}},
)
# ---- --stack: one flag, one parser (searcher/cli/stack.py), on every command that takes it
STACK_COMMANDS = {
    "search": (["search", "--model", "gpt2", "--gpu", "24GiB", "--out", "{tmp}/out"], None),
    "explain": ([*explain], None),
    "launch": ([*L], plan()),
    "fits": (["fits", "--models", "gpt2"], None),
    "max": (["max", "micro-batch", "--model", "gpt2", "--gpu", "24GiB"], None),
    "fleet": (["fleet", "{tmp}/fleet.yaml"], fleet(POOL + JOB)),
    "check": (["check", "{tmp}/a.yaml", *G], {"a.yaml": {"text": AX + "adapter: lora\n"}}),
}
STACK_BAD = {
    "unknown": ("cuda", "unknown package 'cuda'"),
    "typo": ("flash-attn,bitsandbyte", "unknown package 'bitsandbyte'"),
    "empty": ("", "--stack: unknown package ''"),
    "commas": (",,", "--stack: unknown package ',,'"),
    "all-and-none": ("all,none", "unknown package 'all', 'none'"),
    "long": ("x" * 100000, "--stack: unknown package"),
}
for _cmd, (_argv, _files) in STACK_COMMANDS.items():
    for _k, (_value, _needle) in STACK_BAD.items():
        add(f"{_cmd}-stack-{_k}", [*_argv, "--stack", _value], _needle, _files)
    add(f"{_cmd}-stack-missing-value", [*_argv, "--stack"], "expected one argument", _files)

# ---- family: in fleet jobs and scenario models (--family's meaning and checks)
_UNKNOWN_TYPE = cfg(model_type="myllama")
_FAM_JOB = JOB.replace("llama-3.2-1b", "cfg.json").replace("seq_len: 2048", "seq_len: 128")
for _k, (_line, _needle, _model) in {
    "unsupported": ("    family: gpt9\n", "jobs[0].family: family 'gpt9' is not a supported", None),
    "empty": ('    family: ""\n', "jobs[0].family", None),
    "number": ("    family: 5\n", "jobs[0].family", None),
    "catalog": ("    family: llama\n", "does nothing with the catalog model", "llama-3.2-1b"),
    "contradicts": ("    family: gpt2\n", "contradicts the config's model_type", "llama.json"),
    "absent": ("", "add family: NAME", None),
}.items():
    _job = _FAM_JOB if _model is None else _FAM_JOB.replace("cfg.json", _model)
    add(
        f"fleet-family-{_k}",
        ["fleet", "{tmp}/fleet.yaml"],
        _needle,
        {
            **fleet(POOL + _job + _line),
            "cfg.json": _UNKNOWN_TYPE,
            "llama.json": cfg(model_type="llama"),
        },
    )
_CASE = "title: x\ncases:\n  - name: a\n    model: {MODEL}\n    expect: {fits: {equals: true}}\n"
for _k, (_model, _needle) in {
    "catalog": ("{id: gpt2, family: llama}", "does nothing with the catalog model"),
    "raw": ("{params: 7e9, family: llama}", "not to raw numbers"),
    "number": ("{config: c.json, family: 5}", "must be a family name"),
    "empty": ("{config: c.json, family: ''}", "must be a family name"),
    "typo-key": ("{id: gpt2, famly: llama}", "unknown key 'famly'"),
}.items():
    add(
        f"scenario-family-{_k}",
        ["scenario", "run", "{tmp}/s.yaml"],
        _needle,
        {"s.yaml": {"text": _CASE.replace("{MODEL}", _model)}},
    )
# ---- scenario case values, checked when the file is read (fuzzed: 13 of 150 mutated scenario
# files reached a float()/int()/set() on a wrong value: exit 70 before the fix)
_SC = "title: x\ncases:\n  - name: ok\n    model: {id: gpt2}\n    expect: {fits: {equals: true}}\n"
_SC += "  - name: a\n    kind: {KIND}\n    model: {MODEL}\n{MORE}    expect: {EXPECT}\n"
for _k, (_kind, _model, _more, _expect, _needle) in {
    "params-text": (
        "explain",
        "{params: lots}",
        "",
        "{fits: {equals: true}}",
        "model.params must be a number",
    ),
    "params-nan": (
        "explain",
        "{params: .nan}",
        "",
        "{fits: {equals: true}}",
        "model.params must be a finite",
    ),
    "layers-float": (
        "explain",
        "{params: 7e9, layers: 2.5}",
        "",
        "{fits: {equals: true}}",
        "model.layers must be a whole",
    ),
    "headroom-2": (
        "explain",
        "{id: gpt2}",
        "    headroom: 2\n",
        "{fits: {equals: true}}",
        "headroom 2 is absurdly large",
    ),
    "config-knob": (
        "explain",
        "{id: gpt2}",
        "    config: {colour: red}\n",
        "{fits: {equals: true}}",
        "unknown knob 'colour'",
    ),
    "config-list": (
        "search",
        "{id: gpt2}",
        "    config: {recipe: [a, b]}\n",
        "{front.any_fits: {equals: true}}",
        "config.recipe must be one value",
    ),
    "config-value": (
        "search",
        "{id: gpt2}",
        "    config: {micro_batch: -2}\n",
        "{front.any_fits: {equals: true}}",
        "config.micro_batch",
    ),
    "explain-config": (
        "explain",
        "{id: gpt2}",
        "    config: {method: lora, lora_rank: 0}\n",
        "{fits: {equals: true}}",
        "config",
    ),
    "inputs-unknown": (
        "search",
        "{id: gpt2}",
        "    inputs: {gpu: 8}\n",
        "{front.any_fits: {equals: true}}",
        "unknown input 'gpu' for kind search",
    ),
    "inputs-text": (
        "fits",
        "{id: gpt2}",
        "    inputs: {seq_len: long}\n",
        "{full.fits: {equals: true}}",
        "inputs.seq_len must be a whole number",
    ),
    "inputs-size": (
        "search",
        "{id: gpt2}",
        "    inputs: {cpu_ram: {a: 1}}\n",
        "{front.any_fits: {equals: true}}",
        "inputs.cpu_ram must be a size",
    ),
    "serve-tokens": (
        "serve",
        "{id: gpt2}",
        "    inputs: {tokens: 5}\n",
        "{tp: {value: 1}}",
        "inputs.tokens must be a list",
    ),
    "serve-util": (
        "serve",
        "{id: gpt2}",
        "    inputs: {gpu_memory_utilization: 3}\n",
        "{tp: {value: 1}}",
        "gpu_memory_utilization 3",
    ),
    "tensor-missing": (
        "saved_tensor",
        "{}",
        "    inputs: {batch: 1}\n",
        "{tensor_bytes: {bytes: 1}}",
        "saved_tensor needs seq_len",
    ),
    "expect-scalar": ("explain", "{id: gpt2}", "", "{total: 5}", "expect.total"),
    "expect-key": (
        "explain",
        "{id: gpt2}",
        "",
        "{total: {gigs: 5}}",
        "unknown expectation key 'gigs'",
    ),
    "expect-text": (
        "explain",
        "{id: gpt2}",
        "",
        "{total: {gb: many}}",
        "expect.total.gb must be a number",
    ),
    "expect-tol": (
        "explain",
        "{id: gpt2}",
        "",
        "{total: {gb: 5, tol: -1}}",
        "expect.total.tol must be a finite",
    ),
    "expect-contains": (
        "search",
        "{id: gpt2}",
        "",
        "{front.methods: {contains: lora}}",
        "contains must be a list",
    ),
}.items():
    _text = _SC.replace("{KIND}", _kind).replace("{MODEL}", _model).replace("{MORE}", _more)
    add(
        f"scenario-value-{_k}",
        ["scenario", "run", "{tmp}/s.yaml"],
        _needle,
        {"s.yaml": {"text": _text.replace("{EXPECT}", _expect)}},
    )

# ---- config.json of types fitplan does not model, as transformers 5.x save_pretrained writes
# them (tools/arch_sweep.py): refused for the type, naming it, not for a field it spells otherwise
_ARCH = ["explain", "--model", "{tmp}/config.json", "--gpu", "a100-80gb"]
for _k, _text, _needle in [
    (  # Mamba-2's time_step_limit default (0.0, inf) is written as Infinity
        "mamba2-infinity",
        '{"model_type": "mamba2", "hidden_size": 64, "time_step_limit": [0.0, Infinity]}',
        "mamba2",
    ),
    (  # Swin's num_heads is one number per stage
        "swin-heads-list",
        json.dumps({"model_type": "swin", "embed_dim": 96, "num_heads": [3, 6, 12, 24]}),
        "swin",
    ),
    (  # a wrapper whose text model is a type fitplan does not read (Gemma 3's is: planned)
        "aya-vision-multimodal",
        json.dumps({"model_type": "aya_vision", "text_config": {"model_type": "cohere2"}}),
        "cohere2",
    ),
    (  # a GPT-2 decoder with cross-attention layers (GPT2Block's crossattention)
        "gpt2-cross-attention",
        json.dumps(
            {
                "model_type": "gpt2",
                "n_embd": 64,
                "n_head": 4,
                "n_layer": 2,
                "vocab_size": 100,
                "add_cross_attention": True,
            }
        ),
        "cross-attention",
    ),
    (  # Qwen3-MoE's two names of one field (attribute_map), disagreeing
        "moe-expert-names-disagree",
        json.dumps(
            {
                **T,
                "model_type": "qwen3_moe",
                "num_experts": 8,
                "num_local_experts": 16,
                "num_experts_per_tok": 2,
                "moe_intermediate_size": 32,
            }
        ),
        "disagree",
    ),
]:
    add(f"arch-{_k}", _ARCH, _needle, {"config.json": {"text": _text}})

# ---- the readers of this session's types: lists per layer, nested attention configs, renamed
# keys, switches, and what transformers' class would not build
_SMALL = {
    "hidden_size": 64,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "vocab_size": 100,
}
for _k, _extra, _needle in [
    (
        "mlp-layer-types-not-a-list",
        {"model_type": "glm4_moe_lite", "mlp_layer_types": "dense"},
        "mlp_layer_types must list",
    ),
    (
        "mlp-layer-types-dense-after-sparse",
        {
            "model_type": "glm4_moe_lite",
            "num_key_value_heads": 4,
            "mlp_layer_types": ["dense", "sparse", "dense", "sparse"],
        },
        "dense layer after a sparse",
    ),
    (
        "mlp-layer-types-wrong-length",
        {"model_type": "exaone_moe", "intermediate_size": 96, "mlp_layer_types": ["dense"] * 40},
        "lists 40 layers",
    ),
    (
        "mlp-layer-types-nested",
        {"model_type": "exaone_moe", "intermediate_size": 96, "mlp_layer_types": [["dense"]] * 4},
        "mlp_layer_types must list",
    ),
    (
        "sarvam-renamed-key-disagrees",
        {"model_type": "sarvam_moe", "num_experts": 8, "n_routed_experts": 16},
        "disagree",
    ),
    (
        "layer-types-wrong-length",
        {
            "model_type": "mistral",
            "intermediate_size": 96,
            "sliding_window": 16,
            "layer_types": ["sliding_attention"],
        },
        "layer_types must list",
    ),
    (
        "layer-types-a-string",
        {
            "model_type": "mistral",
            "intermediate_size": 96,
            "sliding_window": 16,
            "layer_types": "sliding_attention",
        },
        "layer_types must list",
    ),
    (
        "sliding-pattern-negative",
        {
            "model_type": "gemma3_text",
            "intermediate_size": 96,
            "sliding_window": 16,
            "sliding_window_pattern": -2,
        },
        "sliding_window_pattern must be",
    ),
    (
        "use-post-norm-a-string",
        {"model_type": "hyperclovax", "intermediate_size": 96, "use_post_norm": "yes"},
        "use_post_norm must be true or false",
    ),
    (
        "ernie-moe-end-index-early",
        {"model_type": "ernie4_5_moe", "intermediate_size": 96, "moe_layer_end_index": 1},
        "moe_layer_end_index 1",
    ),
    (
        "ernie-moe-end-index-a-string",
        {"model_type": "ernie4_5_moe", "intermediate_size": 96, "moe_layer_end_index": "last"},
        "moe_layer_end_index must be an integer",
    ),
    (
        "ernie-moe-use-bias",
        {"model_type": "ernie4_5_moe", "intermediate_size": 96, "use_bias": True},
        "use_bias",
    ),
    (
        "phimoe-lm-head-bias",
        {"model_type": "phimoe", "intermediate_size": 96, "lm_head_bias": True},
        "lm_head_bias",
    ),
    (
        "mpt-expansion-ratio",
        {"model_type": "mpt", "d_model": 64, "n_layers": 2, "n_heads": 4, "expansion_ratio": 3},
        "expansion_ratio 3",
    ),
    (
        "mpt-attn-config-a-string",
        {"model_type": "mpt", "d_model": 64, "n_layers": 2, "n_heads": 4, "attn_config": "flash"},
        "attn_config must be",
    ),
    (
        "mpt-multiquery",
        {
            "model_type": "mpt",
            "d_model": 64,
            "n_layers": 2,
            "n_heads": 4,
            "attn_config": {"attn_type": "multiquery_attention"},
        },
        "attn_type",
    ),
    (
        "bloom-heads-do-not-divide",
        {"model_type": "bloom", "hidden_size": 64, "n_head": 5, "n_layer": 2},
        "not divisible",
    ),
]:
    add(f"arch-{_k}", _ARCH, _needle, {"config.json": {"text": json.dumps({**_SMALL, **_extra})}})

seen = set()
for c in cases:
    assert c["id"] not in seen, c["id"]
    seen.add(c["id"])
# ---- real configs that are not training configs, and the readers added with them (realcfg)
TT_EVAL = TT + "tasks: [truthfulqa_mc2]\nbatch_size: 8\n"
add(
    "check-torchtune-evaluation-config",
    ["check", "{tmp}/tt.yaml", *G],
    "torchtune evaluation config",
    {"tt.yaml": {"text": TT_EVAL}},
)
add(
    "check-torchtune-generation-config",
    ["check", "{tmp}/tt.yaml", *G],
    "torchtune generation config",
    {"tt.yaml": {"text": TT + "prompt:\n  user: hello\n"}},
)
add(
    "check-torchtune-ppo-config",
    ["check", "{tmp}/tt.yaml", *G],
    "torchtune PPO config",
    {
        "tt.yaml": {
            "text": "policy_model:\n  _component_: torchtune.models.mistral.mistral_7b\n"
            "optimizer:\n  _component_: torch.optim.AdamW\nbatch_size: 64\n"
        }
    },
)
add(
    "check-torchtune-unknown-builder",
    ["check", "{tmp}/tt.yaml", "--gpu", "a100-80gb"],
    "model builder torchtune.models.foo.lora_foo_9b is not in fitplan's torchtune table",
    {
        "tt.yaml": {
            "text": "model:\n  _component_: torchtune.models.foo.lora_foo_9b\n"
            "optimizer:\n  _component_: torch.optim.AdamW\nbatch_size: 2\n"
        }
    },
)
add(
    "check-llamafactory-inference-config",
    ["check", "{tmp}/lf.yaml", *G],
    "inference or export config (infer_backend)",
    {
        "lf.yaml": {
            "text": "model_name_or_path: Qwen/Qwen3-4B\ntemplate: qwen3\ninfer_backend: hf\n"
        }
    },
)
add(
    "check-llamafactory-export-config",
    ["check", "{tmp}/lf.yaml", *G],
    "inference or export config (export_dir)",
    {
        "lf.yaml": {
            "text": "model_name_or_path: Qwen/Qwen3-4B\nadapter_name_or_path: saves/x\n"
            "finetuning_type: lora\nexport_dir: out\n"
        }
    },
)
add(
    "check-llamafactory-v1-export-config",
    ["check", "{tmp}/lf.yaml", *G],
    "inference or export config (export_dir)",
    {"lf.yaml": {"text": "model: Qwen/Qwen3-4B\npeft_config:\n  name: lora\n  export_dir: out\n"}},
)
add(
    "check-llamafactory-v1-rank-text",
    ["check", "{tmp}/lf.yaml", *G],
    "peft_config.r must be a whole number",
    {"lf.yaml": {"text": "model: Qwen/Qwen3-4B\npeft_config:\n  name: lora\n  r: lots\n"}},
)
add(
    "check-llamafactory-v1-peft-scalar",
    ["check", "{tmp}/lf.yaml", *G],
    "peft_config must be a mapping",
    {"lf.yaml": {"text": "model: Qwen/Qwen3-4B\npeft_config: lora\nmicro_batch_size: 1\n"}},
)
add(
    "check-axolotl-batch-size-text",
    ["check", "{tmp}/a.yaml", *G],
    "batch_size must be a whole number",
    {"a.yaml": {"text": AX + "batch_size: many\nmicro_batch_size: 2\n"}},
)

add(
    "check-torchtune-attn-modules-nested",
    ["check", "{tmp}/tt.yaml", *G],
    "model.lora_attn_modules must be a list of module names",
    {
        "tt.yaml": {
            "text": TT + "  lora_attn_modules: [[q_proj]]\n"
            "optimizer:\n  _component_: torch.optim.AdamW\nbatch_size: 2\n"
        }
    },
)

add(
    "check-axolotl-rank-mapping",
    ["check", "{tmp}/a.yaml", *G],
    "lora_r must be a number, got a mapping",
    {"a.yaml": {"text": AX + "adapter: lora\nlora_r:\n  a: 1\n"}},
)

# ---- grad_sync: a value that is not one, and a plan torchtune cannot run (its recipes reduce
# on every micro-batch; a last-micro-batch FSDP plan that accumulates is refused by name)
add("explain-grad-sync-unknown", [*explain, "--grad-sync", "never"], "--grad-sync")
add(
    "launch-grad-sync-unknown",
    L,
    "grad_sync",
    plan(lambda d: d["config"].update(grad_sync="sometimes")),
)


def _fsdp_unsynced(d):
    d["config"].update(
        method="full", dp=4, zero=3, backend="fsdp2", grad_sync="last-micro-batch", gpus=4
    )


add(
    "launch-torchtune-grad-sync-last",
    ["launch", "{tmp}/plan.json", "--emit", "torchtune", "--out", "{tmp}/out"],
    "grad_sync=last-micro-batch",
    plan(_fsdp_unsynced),
)

with open("tests/data/hostile/cases.jsonl", "w", encoding="utf-8") as f:
    for c in cases:
        f.write(json.dumps(c, ensure_ascii=True) + "\n")
print(len(cases))
