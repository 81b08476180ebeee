"""The body of the emitted HF Trainer script (train.py), below the emitter's header of constants
(every knob of the plan); it imports torch, transformers, peft and datasets inside functions, so
that a test can import the script and call its ``*_kwargs`` functions without building a model."""

from __future__ import annotations

BODY = '''
HERE = os.path.dirname(os.path.abspath(__file__))
CPU_SHARDED = False  # set by main(): see cpu_distributed_state


def say(line):
    """One status line in one write: the ranks share a pipe, and print() writes the text and its
    newline apart, so two ranks' lines could run together."""
    sys.stdout.write(line + "\\n")
    sys.stdout.flush()


def _torch_dtype(name):
    import torch

    return {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[name]


def _cuda():
    import torch

    return torch.cuda.is_available()


def resolve_accelerate_paths():
    """accelerate_config.yaml names ds_config.json relative to itself (it lies beside this
    script), so the folder can be moved and launched from anywhere; accelerate would read the
    name relative to the current directory."""
    name = os.environ.get("ACCELERATE_DEEPSPEED_CONFIG_FILE")
    if name and not os.path.isabs(name) and os.path.isfile(os.path.join(HERE, name)):
        os.environ["ACCELERATE_DEEPSPEED_CONFIG_FILE"] = os.path.join(HERE, name)


def cpu_distributed_state():
    """Several processes and no CUDA (a CPU smoke test of the launch): set up accelerate's state
    on gloo with CPU tensors before TrainingArguments, so that FSDP2 and DeepSpeed shard here as
    they would on GPUs. Left to itself, accelerate enables FSDP and DeepSpeed only on accelerator
    devices: without CUDA it runs each process alone (ZeRO then sees a world of 1), or with
    use_cpu=True as plain DDP. Returns True when it did (TrainingArguments then reuses the state)."""
    if _cuda() or int(os.environ.get("WORLD_SIZE", "1")) == 1:
        return False
    if not (DEEPSPEED or FSDP or os.environ.get("ACCELERATE_USE_DEEPSPEED") == "true"
            or os.environ.get("ACCELERATE_USE_FSDP") == "true"):
        return False  # DDP: accelerate's own CPU path (use_cpu=True) is the real one
    from accelerate.state import PartialState
    from accelerate.utils import DistributedType

    if DEEPSPEED:
        os.environ["ACCELERATE_USE_DEEPSPEED"] = "true"  # deepspeed.init_distributed on gloo
    given = os.environ.get("ACCELERATE_DEEPSPEED_CONFIG_FILE")
    if given:  # accelerate's DeepSpeed plugin reads the JSON itself: hand it the CPU variant
        with open(given, encoding="utf-8") as f:
            ds = cpu_deepspeed(json.load(f))
        import tempfile

        with tempfile.NamedTemporaryFile(  # not in the emitted folder: it stays as written
            "w", suffix=".json", prefix="fitplan-cpu-ds-", delete=False, encoding="utf-8"
        ) as f:
            json.dump(ds, f)
            path = f.name
        os.environ["ACCELERATE_DEEPSPEED_CONFIG_FILE"] = path
    state = PartialState(backend="gloo")
    if state.distributed_type == DistributedType.NO:
        # the branch in which AcceleratorState turns the FSDP plugin on; the device stays the CPU
        state.distributed_type = DistributedType.MULTI_GPU
    return True


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        description=__doc__.strip().splitlines()[0],
        epilog=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--model", default=MODEL, help="Hugging Face repo or local folder (default: %(default)s)")
    p.add_argument("--tokenizer", default=None, help="tokenizer repo or folder (default: --model)")
    p.add_argument(
        "--dataset",
        default="wikitext",
        help="a datasets name, or a local .json/.jsonl/.txt/.csv/.parquet file (default: %(default)s)",
    )
    p.add_argument("--dataset-config", default="wikitext-2-raw-v1", help="datasets config (default: %(default)s)")
    p.add_argument("--split", default="train", help="dataset split (default: %(default)s)")
    p.add_argument("--text-column", default="text", help="column holding the text (default: %(default)s)")
    p.add_argument(
        "--synthetic-data",
        action="store_true",
        help="random token ids instead of a dataset: no download, no tokenizer (smoke tests)",
    )
    p.add_argument(
        "--random-init",
        action="store_true",
        help="random weights built from the model's config.json instead of its checkpoint (smoke tests)",
    )
    p.add_argument("--max-steps", type=int, default=-1, help="optimizer steps (default: one epoch)")
    p.add_argument("--learning-rate", type=float, default=LEARNING_RATE, help="(default: %(default)s)")
    p.add_argument(
        "--output-dir",
        default=os.path.join(HERE, "fitplan-run"),
        help="checkpoints and logs (default: fitplan-run beside this script)",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--allow-other-world-size",
        action="store_true",
        help="run on another number of processes than the plan's (changes the effective batch)",
    )
    # the deepspeed launcher passes --local_rank=N (torchrun and accelerate set LOCAL_RANK instead)
    p.add_argument("--local_rank", "--local-rank", type=int, default=None, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def check_world_size(args):
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world != WORLD_SIZE and not args.allow_other_world_size:
        sys.exit(
            f"train.py: this plan runs on {WORLD_SIZE} process(es) (effective batch "
            f"{MICRO_BATCH} x {GRAD_ACCUM} x {WORLD_SIZE} = {MICRO_BATCH * GRAD_ACCUM * WORLD_SIZE} "
            f"sequences), but WORLD_SIZE is {world}; launch it with: {LAUNCH}"
        )


def deepspeed_config(args):
    """The DeepSpeed JSON next to this script, with --learning-rate applied to its optimizer."""
    with open(os.path.join(HERE, DEEPSPEED), encoding="utf-8") as f:
        ds = json.load(f)
    if "optimizer" in ds:
        ds["optimizer"]["params"]["lr"] = args.learning_rate
    return cpu_deepspeed(ds)


def cpu_deepspeed(ds):
    """Without CUDA (a CPU smoke test): DeepSpeed's AdamW as torch's (torch_adam), not its fused
    or CPU-Adam C++ kernel, which would first be compiled with a C++ toolchain (minutes). Same
    update rule; ZeRO-Offload is told to accept it (zero_force_ds_cpu_optimizer)."""
    opt = ds.get("optimizer") or {}
    if not _cuda() and opt.get("type") == "AdamW":
        opt["params"]["torch_adam"] = True
        if (ds.get("zero_optimization", {}).get("offload_optimizer") or {}).get("device") == "cpu":
            ds["zero_force_ds_cpu_optimizer"] = False
    return ds


def training_arguments_kwargs(args):
    """Everything TrainingArguments receives: the plan's knobs and the run's paths."""
    kw = dict(
        output_dir=args.output_dir,
        per_device_train_batch_size=MICRO_BATCH,
        gradient_accumulation_steps=GRAD_ACCUM,
        learning_rate=args.learning_rate,
        max_steps=args.max_steps,
        num_train_epochs=1,
        lr_scheduler_type="cosine",
        weight_decay=0.0,
        max_grad_norm=MAX_GRAD_NORM,
        adam_beta1=ADAM_BETA1,
        adam_beta2=ADAM_BETA2,
        adam_epsilon=ADAM_EPSILON,
        optim=OPTIM,
        bf16=MIXED_PRECISION == "bf16",
        fp16=MIXED_PRECISION == "fp16",
        gradient_checkpointing=GRADIENT_CHECKPOINTING,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        remove_unused_columns=False,
        dataloader_drop_last=True,
        seed=args.seed,
        use_cpu=not _cuda() and not CPU_SHARDED,
    )
    if CPU_SHARDED:
        kw["accelerator_config"] = {"use_configured_state": True}
    if SYNC_EACH_BATCH is not None:
        kw["accelerator_config"] = {
            **kw.get("accelerator_config", {}),
            "gradient_accumulation_kwargs": {"sync_each_batch": SYNC_EACH_BATCH},
        }
    if GRADIENT_CHECKPOINTING:
        kw["gradient_checkpointing_kwargs"] = {"use_reentrant": False}
    if OPTIM_ARGS:
        kw["optim_args"] = OPTIM_ARGS
    if FUSED_CROSS_ENTROPY:
        kw["use_liger_kernel"] = True
        kw["liger_kernel_config"] = {
            "fused_linear_cross_entropy": True,
            "cross_entropy": False,
            "rope": False,
            "rms_norm": False,
            "swiglu": False,
            "geglu": False,
            "layer_norm": False,
        }
    if DEEPSPEED:
        kw["deepspeed"] = deepspeed_config(args)
    if FSDP:
        kw["fsdp"] = FSDP["fsdp"]
        kw["fsdp_config"] = dict(FSDP["fsdp_config"])
    if WORLD_SIZE > 1:
        kw["ddp_find_unused_parameters"] = False
    return _current_names(kw)


def cpu_sharded_arguments(cls, kw):
    """TrainingArguments, also for a bf16 plan sharded across CPU processes (a smoke test): its
    check refuses bf16 without a GPU unless use_cpu, which drops the sharding; torch and
    DeepSpeed run bf16 on the CPU, so that one check is told so while the arguments are built."""
    if not CPU_SHARDED or not kw.get("bf16"):
        return cls(**kw)
    import transformers.training_args as checks

    gpu_check = checks.is_torch_bf16_gpu_available
    checks.is_torch_bf16_gpu_available = lambda *a, **k: True
    try:
        return cls(**kw)
    finally:
        checks.is_torch_bf16_gpu_available = gpu_check


def _current_names(kw):
    """transformers >= 5.x renamed gradient_checkpointing to activation_checkpointing."""
    import dataclasses

    from transformers import TrainingArguments

    names = {f.name for f in dataclasses.fields(TrainingArguments)}
    for old, new in (
        ("gradient_checkpointing", "activation_checkpointing"),
        ("gradient_checkpointing_kwargs", "activation_checkpointing_kwargs"),
    ):
        if old in kw and new in names:
            kw[new] = kw.pop(old)
    return kw


def lora_config_kwargs():
    """PEFT LoraConfig arguments (None for a full fine-tune)."""
    if METHOD == "full":
        return None
    return dict(LORA, task_type="CAUSAL_LM", bias="none")


def bnb_config_kwargs():
    """BitsAndBytesConfig arguments with torch dtypes (None without a quantised base)."""
    if not QUANT:
        return None
    q = dict(QUANT)
    for key in ("bnb_4bit_compute_dtype", "bnb_4bit_quant_storage"):
        if key in q:
            q[key] = _torch_dtype(q[key])
    return q


def _dtype_kwarg():
    import transformers

    major = int(transformers.__version__.split(".")[0])
    return "dtype" if major >= 5 else "torch_dtype"


def model_config(args):
    """The model's config: config.json beside this script for the plan's model (no download, so
    --random-init works offline; its shrunken copy on a CPU smoke test), else --model's."""
    from transformers import AutoConfig

    smoke = os.path.join(HERE, "config.smoke.json")
    if args.model == MODEL and args.random_init and not _cuda() and os.path.isfile(smoke):
        return AutoConfig.from_pretrained(smoke)
    if args.model == MODEL and os.path.isfile(os.path.join(HERE, "config.json")):
        return AutoConfig.from_pretrained(HERE)
    return AutoConfig.from_pretrained(args.model)


def build_model(args, training_args):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    kwargs = {"attn_implementation": ATTN_IMPLEMENTATION, _dtype_kwarg(): _torch_dtype(LOAD_DTYPE)}
    q = bnb_config_kwargs()
    if q:
        from transformers import BitsAndBytesConfig

        kwargs["quantization_config"] = BitsAndBytesConfig(**q)
        if not SHARDED_WEIGHTS:
            kwargs["device_map"] = {"": local_rank if _cuda() else "cpu"}
        if not _cuda():  # bitsandbytes (0.49+, requirements.txt) runs its 4-bit matmul on the CPU
            print("fitplan: no CUDA: bitsandbytes quantises the base on the CPU", flush=True)
    if args.random_init and not q:
        torch.manual_seed(args.seed)  # the same random weights on every process
        model = AutoModelForCausalLM.from_config(model_config(args), **kwargs)
    else:
        source = args.model
        if args.random_init:
            # bitsandbytes quantises while loading a checkpoint: rank 0 writes a random one
            source = os.path.join(args.output_dir, "random-init")
            with training_args.main_process_first(desc="random init", local=False):
                if not os.path.exists(os.path.join(source, "config.json")):
                    torch.manual_seed(args.seed)
                    config = model_config(args)
                    AutoModelForCausalLM.from_config(config).save_pretrained(source)
        model = AutoModelForCausalLM.from_pretrained(source, **kwargs)
    model.config.use_cache = False
    lora = lora_config_kwargs()
    if lora:
        from peft import LoraConfig, get_peft_model

        if PREPARE_KBIT:
            from peft import prepare_model_for_kbit_training

            # checkpointing stays the Trainer's (gradient_checkpointing above)
            model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=False)
        if GRADIENT_CHECKPOINTING or ACTIVATION_CHECKPOINTING_BY_SHARDING:
            model.enable_input_require_grads()
        # PEFT keeps adapters in fp32 by default (autocast_adapter_dtype=True); fitplan modelled
        # ADAPTER_DTYPE, so the adapters are cast to it explicitly
        model = get_peft_model(
            model, LoraConfig(**lora), autocast_adapter_dtype=ADAPTER_DTYPE == "fp32"
        )
        dtype = _torch_dtype(ADAPTER_DTYPE)
        for p in model.parameters():
            if p.requires_grad and p.dtype != dtype:
                p.data = p.data.to(dtype)
        model.print_trainable_parameters()
    return model


def build_dataset(args, vocab_size, training_args):
    """Sequences of exactly SEQ_LEN tokens (packed), as the plan's activation memory assumes."""
    import torch

    if args.synthetic_data:
        world = int(os.environ.get("WORLD_SIZE", "1"))
        steps = args.max_steps if args.max_steps > 0 else 8
        n = steps * MICRO_BATCH * GRAD_ACCUM * world
        g = torch.Generator().manual_seed(args.seed)
        ids = torch.randint(0, vocab_size, (n, SEQ_LEN), generator=g)
        return [{"input_ids": r, "labels": r.clone(), "attention_mask": torch.ones_like(r)} for r in ids]
    try:
        from datasets import load_dataset
    except ImportError:
        sys.exit("train.py: real data needs `pip install datasets` (or pass --synthetic-data)")
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer or args.model)
    if os.path.isfile(args.dataset):
        ext = args.dataset.rsplit(".", 1)[-1].lower()
        builder = {"jsonl": "json", "json": "json", "txt": "text", "csv": "csv", "parquet": "parquet"}
        if ext not in builder:
            sys.exit(f"train.py: cannot read {args.dataset}: use .json, .jsonl, .txt, .csv or .parquet")
        ds = load_dataset(builder[ext], data_files=args.dataset, split="train")
    else:
        ds = load_dataset(args.dataset, args.dataset_config, split=args.split)
    eos = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []

    def tokenize(batch):
        return tokenizer(batch[args.text_column], add_special_tokens=True)

    def pack(batch):
        ids = [t for seq in batch["input_ids"] for t in list(seq) + eos]
        n = len(ids) // SEQ_LEN * SEQ_LEN
        blocks = [ids[i : i + SEQ_LEN] for i in range(0, n, SEQ_LEN)]
        return {"input_ids": blocks, "labels": [list(b) for b in blocks], "attention_mask": [[1] * SEQ_LEN for _ in blocks]}

    with training_args.main_process_first(desc="tokenize and pack"):
        ds = ds.map(tokenize, batched=True, remove_columns=ds.column_names)
        ds = ds.map(pack, batched=True, remove_columns=ds.column_names)
    ds.set_format("torch")
    return ds


def sharding_report(trainer):
    """What engine really trained, from the objects themselves (one line per process): FSDP2
    (the model is an FSDPModule; its parameters DTensors of which this rank holds a shard), a
    DeepSpeed engine (the ZeRO stage it reports; under ZeRO-3 each parameter's local partition),
    DDP, or a single process."""
    import torch.distributed as dist

    rank = dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
    world = dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1
    model = trainer.model_wrapped
    params = list(trainer.model.parameters())
    total = sum(p.numel() for p in params)
    try:
        from torch.distributed.fsdp import FSDPModule
    except ImportError:  # torch < 2.6
        FSDPModule = ()
    engine = type(model).__name__
    if isinstance(trainer.model, FSDPModule) or isinstance(model, FSDPModule):
        local = sum(p.to_local().numel() if hasattr(p, "to_local") else p.numel() for p in params)
        root = trainer.model if isinstance(trainer.model, FSDPModule) else model
        groups = [m._get_fsdp_state()._fsdp_param_group for m in root.modules() if isinstance(m, FSDPModule)]
        # reshard_after_forward=True keeps post-forward mesh info (parameters freed after forward)
        resharded = any(g is not None and g.post_forward_mesh_info is not None for g in groups)
        engine = "fsdp2 " + ("full_shard" if resharded else "shard_grad_op")
    elif hasattr(model, "zero_optimization_stage"):
        stage = model.zero_optimization_stage()
        engine = f"deepspeed zero{stage}"
        local = sum(p.ds_tensor.numel() if hasattr(p, "ds_tensor") else p.numel() for p in params)
        total = sum(p.ds_numel if hasattr(p, "ds_numel") else p.numel() for p in params)
        # ZeRO-1/2: the fp32 optimizer partition this rank updates
        parts = getattr(model.optimizer, "single_partition_of_fp32_groups", None) or []
        if parts:
            engine += f" optimizer partition {sum(p.numel() for p in parts)}"
    else:
        local = total
        engine = "ddp" if type(model).__name__ == "DistributedDataParallel" else "single"
    say(f"fitplan: rank {rank}/{world} engine {engine} holds {local} of {total} parameter values")


def main(argv=None):
    global CPU_SHARDED
    args = parse_args(argv)
    check_world_size(args)
    resolve_accelerate_paths()
    CPU_SHARDED = cpu_distributed_state()
    if SMOKE_NOTE and args.random_init and args.model == MODEL and not _cuda() and not int(os.environ.get("RANK", "0")):
        say(f"fitplan: no CUDA: the smoke test builds a shrunken copy of the model: {SMOKE_NOTE}")
    from transformers import Trainer, TrainingArguments, default_data_collator

    # TrainingArguments first: under ZeRO-3 the model is then built already partitioned
    training_args = cpu_sharded_arguments(TrainingArguments, training_arguments_kwargs(args))
    vocab_size = model_config(args).vocab_size
    model = build_model(args, training_args)
    dataset = build_dataset(args, vocab_size, training_args)
    trainer = Trainer(model=model, args=training_args, train_dataset=dataset, data_collator=default_data_collator)
    trainer.train()
    sharding_report(trainer)
    if trainer.is_world_process_zero():
        for entry in trainer.state.log_history:
            if "loss" in entry:
                say(f"fitplan: step {entry['step']} loss {entry['loss']:.6f}")
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        # tear the process group down before exit: left to the interpreter's shutdown, the
        # backend's threads can abort the process ("terminate called without an active exception")
        dist.barrier()
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
'''
