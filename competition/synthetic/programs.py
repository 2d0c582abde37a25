"""Synthetic HLO-like programs for the TpuGraphs world: drawing a program's model and size, and assembling it.

``xla`` programs mix model families, as the real ``xla`` collections do: ResNet- and Inception-like CNNs,
3-D UNets, BERT-like encoders, recommenders and MLPs (:mod:`competition.synthetic.program_families`), in f32,
bf16 and f16 at several batch sizes. Each comes in inference variants (some running several batches in a
``while`` loop, results leaving through ``outfeed``) and training variants: the forward pass, then the training
step of :mod:`competition.synthetic.program_training` (gradients, all-reduce, clipping, loss scaling, optimizer,
learning rate schedule). The step sits in a ``while`` loop whose body and condition are separate computations,
so the real ``node_splits`` rule (cut after cluster / while / cond computations) gives 3 to 7 segments.
Instructions are emitted by :mod:`competition.synthetic.program_emitter` through the layers of
:mod:`competition.synthetic.program_layers`; the fused tile kernels cut from the programs are
:mod:`competition.synthetic.tile_kernels`'s.

``nlp`` programs are one transformer family: real TF-Hub architectures (:data:`NLP_MODELS`, 2 to 24 layers, hidden
128 to 1024) at several batch sizes, trained or run, named as the real files are, so they resemble each other far
more than ``xla`` programs do.

``xla`` node counts are steered to a target by fitting the count as linear in the number of layers / blocks; an
``nlp`` program is the real architecture whose node count is nearest the target.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from competition.hlo.ir import Computation, Instruction, Module, Shape
from competition.synthetic.program_emitter import Emitter, Program
from competition.synthetic.program_families import FAMILIES
from competition.synthetic.program_layers import Net
from competition.synthetic.program_training import train_step

# ----------------------------------------------------------------------------------------------------------------
# Drawing a model configuration and a name.
# ----------------------------------------------------------------------------------------------------------------


# The real nlp layout graphs are TF-Hub BERT-family encoders (names in shared/spec/real-sizes.md): a name stem,
# its (layers, hidden) variants (heads = hidden / 64), and what sets the variant apart: ALBERT shares one layer's
# weights across all layers and factorizes the embedding, talking-heads mixes attention scores across heads.
NLP_MODELS: tuple[tuple[str, tuple[tuple[int, int], ...], dict], ...] = (
    ("small_bert_bert_en_uncased_L-{L}_H-{H}_A-{A}",
     tuple((layers, h) for layers in (2, 4, 6, 8, 10, 12) for h in (128, 256, 512, 768)), {}),
    ("bert_en_uncased_L-{L}_H-{H}_A-{A}", ((12, 768), (24, 1024)), {}),
    ("bert_en_cased_L-{L}_H-{H}_A-{A}", ((12, 768), (24, 1024)), {}),
    ("bert_multi_cased_L-{L}_H-{H}_A-{A}", ((12, 768),), {"vocab": 119547}),
    ("bert_en_wwm_uncased_L-{L}_H-{H}_A-{A}", ((24, 1024),), {}),
    ("albert_en_base", ((12, 768),), {"share": True, "embed": 128, "vocab": 30000}),
    ("albert_en_large", ((24, 1024),), {"share": True, "embed": 128, "vocab": 30000}),
    ("electra_small", ((12, 256),), {}),
    ("electra_base", ((12, 768),), {}),
    ("electra_large", ((24, 1024),), {}),
    ("talking-heads_base", ((12, 768),), {"talking": True}),
    ("talking-heads_large", ((24, 1024),), {"talking": True}),
)
NLP_BATCH_SIZES: tuple[int, ...] = (16, 32, 64)


def _draw_nlp_config(rng: np.random.Generator, target: int) -> dict:
    """What an nlp program's size does not depend on: batch, sequence length, precision and training step."""
    dtype = str(rng.choice(["f32", "bf16", "f16"], p=[0.6, 0.3, 0.1]))
    return dict(family="transformer", batch=int(rng.choice(NLP_BATCH_SIZES)),
                seq=int(rng.choice([128, 256, 512], p=[0.5, 0.25, 0.25])), vocab=30522, max_pos=512, classes=2,
                dtype=dtype, devices=1, optimizer=str(rng.choice(["adamw", "lamb"], p=[0.6, 0.4])),
                schedule=bool(rng.random() < 0.9), clip=bool(rng.random() < 0.7), loss_scale=dtype == "f16",
                loop=bool(rng.random() < 0.4) and target >= 300, lite=target < 300)


def _draw_config(source: str, rng: np.random.Generator, target: int) -> dict:
    dtype = str(rng.choice(["f32", "bf16", "f16"], p=[0.4, 0.4, 0.2]))
    if target < 250:
        family = "mlp"
    else:
        # Recommenders are mostly embedding lookups: only large ones carry enough dots to be layout graphs.
        # and plain MLPs have too few layout nodes once past toy sizes.
        probs = np.array([0.26, 0.10, 0.16, 0.12, 0.26, 0.12 if target >= 1000 else 0.0,
                          0.08 if target < 400 else 0.0])
        family = str(rng.choice(["resnet", "plaincnn", "inception", "unet3d", "bert", "dlrm", "mlp"],
                                p=probs / probs.sum()))
    train = bool(rng.random() < (0.65 if target >= 600 else 0.0))
    # A plain CNN is a layout graph as a training step only: its inference pass is little more than its
    # convolutions (a quarter of the nodes, where real graphs hold at most a tenth configurable).
    train = train or family == "plaincnn"
    devices = int(rng.choice([1, 4, 8, 16])) if train else 1
    cfg = dict(family=family, dtype=dtype, train=train, devices=devices, classes=int(rng.choice([10, 100, 1000])))
    if family in ("resnet", "inception"):
        cfg.update(batch=int(rng.choice([8, 32, 64, 128])), image=int(rng.choice([224, 299] if family == "inception"
                                                                                   else [224, 192])),
                   width=int(rng.choice([32, 64])), nchw=bool(rng.random() < 0.3))
    elif family == "plaincnn":
        # AlexNet (an 11x11 stride-4 stem) or a ZFNet-like 7x7 stride-2 one; 64 or 96 stem channels.
        cfg.update(batch=int(rng.choice([8, 32, 64, 128])), image=224, width=int(rng.choice([64, 96])),
                   stem=((11, 4), (7, 2))[int(rng.random() < 0.3)], hidden=int(rng.choice([1024, 4096])),
                   nchw=bool(rng.random() < 0.3))
    elif family == "unet3d":
        cfg.update(batch=int(rng.choice([1, 2, 4])), image=int(rng.choice([64, 96, 128])),
                   width=int(rng.choice([8, 16, 32])), classes=int(rng.choice([2, 3, 4])),
                   levels=int(rng.choice([3, 4])))
    elif family == "bert":
        cfg.update(batch=int(rng.choice([8, 24, 32, 64])), seq=int(rng.choice([128, 384, 512])),
                   hidden=int(rng.choice([256, 512, 768, 1024])), vocab=30522, max_pos=512, classes=2)
        cfg["heads"] = cfg["hidden"] // 64
    elif family == "dlrm":
        cfg.update(batch=int(rng.choice([256, 512, 2048])), embed=int(rng.choice([16, 64, 128])))
    else:
        cfg.update(batch=int(rng.choice([32, 128, 512])), width=int(rng.choice([256, 512, 1024])),
                   features=int(rng.choice([64, 784, 1024])), gelu=bool(rng.random() < 0.4))
    # The training step: BERT-like models train with Adam-type optimizers and clip gradients, CNNs with momentum or
    # LARS; f16 needs dynamic loss scaling; most steps follow a learning-rate schedule. Inference sometimes runs
    # several batches in a loop.
    # (Mostly LAMB and LARS, as MLPerf's BERT and ResNet use them.)
    optimizers = {"bert": ["adamw", "lamb"], "resnet": ["momentum", "lars"], "plaincnn": ["momentum", "lars"],
                  "inception": ["momentum", "lars"], "unet3d": ["momentum", "lars"]}.get(family)
    cfg.update(optimizer=str(rng.choice(optimizers, p=[0.3, 0.7])) if optimizers else "momentum",
               schedule=bool(rng.random() < 0.8), clip=bool(rng.random() < (0.7 if family == "bert" else 0.2)),
               loss_scale=dtype == "f16", loop=bool(rng.random() < 0.4))
    return cfg


def _model_name(cfg: dict, rng: np.random.Generator, layers: int) -> str:
    mode = "train" if cfg["train"] else "test"
    if cfg["family"] == "transformer":
        stem = cfg["stem"].format(L=layers, H=cfg["hidden"], A=cfg["heads"])
        return f"{stem}_batch_size_{cfg['batch']}_{mode}"
    fam = cfg["family"]
    dt = {"f32": "fp32", "bf16": "bf16", "f16": "fp16"}[cfg["dtype"]]
    topo = str(rng.choice(["2x2", "4x4", "8x8"]))
    stems = {
        "resnet": [f"resnet50.{topo}.{dt}", f"resnet_v1_{50 if layers < 24 else 101}_official_batch_{cfg['batch']}_{dt}",
                   f"resnet_batch_{cfg['batch']}_{mode}"],
        "plaincnn": [f"alexnet_{mode}_batch_{cfg['batch']}",
                     f"vgg{16 if layers > 3 else 11}_batch_{cfg['batch']}_{mode}"],
        "inception": [f"inception_v3_batch_{cfg['batch']}_{mode}", f"inception_v4.{topo}.{dt}"],
        "unet3d": [f"unet_3d.{topo}.{dt}", f"unet3d_batch_{cfg['batch']}_{mode}"],
        "bert": [f"bert_pretraining.{topo}.{dt}", f"mlperf_bert_batch_{cfg['batch']}_{topo}",
                 "tf2_bert_pretrain_dynamic_batch_size"],
        "dlrm": [f"dlrm_batch_{cfg['batch']}_{mode}", f"ncf_batch_{cfg['batch']}_{mode}"],
        "mlp": [f"mlp_batch_{cfg['batch']}_{mode}", f"mnist_mlp.{topo}.{dt}"],
    }[fam]
    return str(stems[int(rng.integers(len(stems)))])


# ----------------------------------------------------------------------------------------------------------------
# Assembly: forward (+ backward + optimizer inside a while loop) into a Module.
# ----------------------------------------------------------------------------------------------------------------


def _params_to_tuple(comp: Computation, prog: Program) -> list[Shape]:
    """Replace the parameters of ``comp`` by get-tuple-elements of one tuple parameter inserted first.

    Every instruction index shifts by exactly one, so operands are remapped by adding 1.

    Returns:
        The element shapes of the tuple parameter, in parameter-number order.
    """
    shapes: dict[int, Shape] = {}
    new = []
    for ins in comp.instructions:
        ops = tuple(o + 1 for o in ins.operands)
        if ins.opcode == "parameter":
            shapes[ins.parameter_number] = ins.shape
            new.append(Instruction("get-tuple-element", ins.shape, (0,), name=f"get-tuple-element.{prog.uid()}"))
        else:
            ins.operands = ops
            new.append(ins)
    elems = [shapes[k] for k in range(len(shapes))]
    tup = Instruction("parameter", Shape("tuple", tuple_shapes=tuple(elems)), (), name=f"arg_tuple.{prog.uid()}",
                      parameter_number=0)
    comp.instructions = [tup, *new]
    return elems


def _build(source: str, cfg: dict, layers: int, seed: int, name: str) -> Module:
    prog = Program(name, np.random.default_rng(seed))
    uid = prog.uid()
    train = cfg["train"]
    looped = train or bool(cfg.get("loop"))
    master = "f32"
    body_name = f"while_body_{uid}" if looped else (f"cluster_{uid}__XlaCompiledKernel_true" if
                                                    prog.rng.random() < 0.6 else f"main.{uid}")
    comp = Computation(body_name)
    e = Emitter(prog, comp)
    net = Net(prog, e, train, cfg["dtype"], master)
    counter = e.param(Shape("s32")) if looped else -1
    out = FAMILIES[cfg["family"]](net, cfg, layers)
    if not looped:
        comp.eliminate_dead_code()
        return Module(name, [*prog.subs, comp])
    if train:
        updates = train_step(prog, e, net, cfg, out, counter)
    else:
        # An inference loop (several batches per device launch): results leave through the outfeed.
        e.op("outfeed", Shape("token"), (out, e.op("after-all", Shape("token"))))
        updates = {}
    updates[counter] = e.ew("add", counter, e.const("s32", "one"))
    params = [i for i, ins in enumerate(comp.instructions) if ins.opcode == "parameter"]
    e.tuple_([updates.get(p, p) for p in params])
    # As XLA would: no gradient of the input data (the first layer's input gradient is computed by the tape, and
    # nothing uses it).
    comp.eliminate_dead_code()
    elems = _params_to_tuple(comp, prog)

    cond = Computation(f"while_cond_{uid}")
    ce = Emitter(prog, cond)
    tp = ce.op("parameter", Shape("tuple", tuple_shapes=tuple(elems)), parameter_number=0)
    it = ce.gte(tp, 0)
    ce.op("compare", Shape("pred"), (it, ce.const("s32", "steps")))

    entry = Computation(f"cluster_{uid}__XlaCompiledKernel_true__XlaNumConstantArgs_0__XlaNumResourceArgs_"
                        f"{len(elems) - 1}_.{prog.uid()}")
    ee = Emitter(prog, entry)
    args = [ee.param(sh) for sh in elems]
    init = ee.tuple_(args)
    loop = ee.op("while", ee.sh(init), (init,), called=(cond.name, body_name))
    results = [ee.gte(loop, k) for k in range(1, len(elems))]
    ee.tuple_(results)
    return Module(name, [*prog.subs, cond, comp, entry])


def build_program(source: str, rng: np.random.Generator, target_nodes: int) -> Module:
    """Draw one program of ``source`` (``"xla"`` or ``"nlp"``) with about ``target_nodes`` instructions.

    ``xla``: the node count is fitted as linear in the number of layers / blocks from two small builds, then the
    program is built at the layer count that hits the target (usually within 15%, always aimed within 35%).
    ``nlp``: a real architecture (:data:`NLP_MODELS`: 2 to 24 layers, hidden 128 to 1024) and mode (train or
    test) whose estimated node count is near the target; the count follows the architecture, so a target beyond
    what a 24-layer training step holds gives a smaller program, and one below a 2-layer encoder a larger one.

    Args:
        source: ``"xla"`` (a mix of model families) or ``"nlp"`` (one transformer family).
        rng: random stream; the result is a deterministic function of its state.
        target_nodes: wanted number of nodes, about 50 to 44,000.

    Returns:
        A module with computations in post-order (helpers first, entry last).
    """
    if source not in ("xla", "nlp"):
        raise ValueError(f"unknown program source {source!r}")
    seed = int(rng.integers(2**63))
    name_rng = np.random.default_rng(int(rng.integers(2**63)))

    def count(cfg: dict, layers: int) -> int:
        return _build(source, cfg, layers, seed, "probe").num_nodes

    if source == "nlp":
        return _build_nlp(rng, target_nodes, count, seed)
    # Some families have a large minimum (a 4-level UNet, a ResNet training step): redraw when even one
    # layer overshoots the target, trying the inference variant first.
    for _ in range(12):
        cfg = _draw_config(source, rng, target_nodes)
        n1 = count(cfg, 1)
        if n1 <= 1.2 * target_nodes:
            break
        if cfg["train"] and cfg["family"] != "plaincnn":
            cfg.update(train=False, devices=1)
            n1 = count(cfg, 1)
            if n1 <= 1.2 * target_nodes:
                break
    n3 = count(cfg, 3)
    slope = max((n3 - n1) / 2.0, 1.0)
    layers = max(1, int(round(1 + (target_nodes - n1) / slope)))
    module = _build(source, cfg, layers, seed, "probe")
    n = module.num_nodes
    if abs(n - target_nodes) > 0.15 * target_nodes and layers > 3:
        # The count is not quite linear (spatial sizes shrink, branches change); one secant step fixes it.
        slope = max((n - n1) / (layers - 1), 1.0)
        layers = max(1, int(round(1 + (target_nodes - n1) / slope)))
        module = _build(source, cfg, layers, seed, "probe")
    module.name = _model_name(cfg, name_rng, layers)
    return module


def _build_nlp(rng: np.random.Generator, target: int, count: Callable[[dict, int], int], seed: int) -> Module:
    """An nlp program: the real architecture and mode whose node count is nearest ``target`` (one drawn at random
    among those within 10% of the nearest), named as the real files are."""
    cfg = _draw_nlp_config(rng, target)
    fit: dict[bool, tuple[float, float]] = {}
    for train in (False, True):
        probe = dict(cfg, train=train, hidden=128, heads=2)
        n1, n3 = count(probe, 1), count(probe, 3)
        fit[train] = (n1, max((n3 - n1) / 2.0, 1.0))
    cands = [(abs(float(np.log((fit[train][0] + fit[train][1] * (layers - 1)) / target))), k, layers, h, train)
             for train in (False, True) for k, (_, variants, _) in enumerate(NLP_MODELS) for layers, h in variants]
    best = min(c[0] for c in cands)
    near = [c for c in cands if c[0] <= best + 0.1]
    _, k, layers, h, train = near[int(rng.integers(len(near)))]
    stem, _, extra = NLP_MODELS[k]
    cfg.update(extra, stem=stem, hidden=h, heads=h // 64, train=train)
    module = _build("nlp", cfg, layers, seed, "probe")
    module.name = _model_name(cfg, rng, layers)
    return module
