"""The bounds on what fastslow reads, in one place: every input has a size, count or depth limit, set well above
the real data, and an input past one is refused in one line naming the file, the limit and the value, before the
work (reading, parsing, allocating) starts. Protobuf bounds its messages the same way (size and recursion limits).

The real maxima each limit sits above are those of ``shared/spec/real-sizes.md`` and
``shared/spec/tpugraphs-format.md`` (the largest layout graph 43,615 nodes; 100,040 configs in one graph; 2,251
configurable nodes x 10,760 configs in one file) and of the real records shipped in ``competition/data``.
docs/reliability.md ("Limits") tables them with the limits defined elsewhere (HLO statements, JSON and TOML nesting,
downloads, submissions).
"""

from __future__ import annotations

import os

MAX_PROGRAM_BYTES = 256 * 2**20
"""The largest program file ``featurize`` reads (HLO text or a serialized ``HloModuleProto``): 256 MiB. The largest
real layout graph (43,615 nodes) is about 7 MB as a proto (the shipped real module takes 156 bytes an
instruction) and under 50 MB as compiled HLO text (about 1 kB a line with its metadata)."""

MAX_PROGRAM_INSTRUCTIONS = 500_000
"""The most instructions a program (or a record's module) may hold: 11 times the largest real layout graph (43,615
nodes). Counted before any instruction is built (a proto's are counted in its bytes, HLO text's statements before
they are parsed)."""

MAX_HLO_TEXT_LINES = 2_000_000
"""The most lines of HLO text ``featurize`` splits: 4 times :data:`MAX_PROGRAM_INSTRUCTIONS` (XLA prints an
instruction a line, with a few more lines a computation). Counted before the text is split."""

MAX_VALUES_PER_ITEM = 64
"""What a proto may decode to: at most this many values (numbers, strings, sub-messages) per instruction, run and
run node it declares, on average; the shipped real module decodes to 16 an instruction, its runs to 10 a run node.
Bounds the memory of a message whose counts are small but whose fields are huge (millions of dimensions in one
shape)."""

PROTO_VALUES_FLOOR = 1_000_000
"""The values any proto may decode to beyond :data:`MAX_VALUES_PER_ITEM` per item: room for a few wide tuples in a
small program (the shipped real module has a tuple of 232 arrays)."""

MAX_PROTO_DEPTH = 100
"""The deepest nesting of sub-messages the proto reader follows: protobuf's own default recursion limit. Real
programs nest 6 deep (module, computation, instruction, shape, tuple element, layout)."""

MAX_TUPLE_DEPTH = 64
"""The deepest nesting of tuple shapes in a program (HLO text or proto): real programs nest 1 deep (a tuple of
arrays; the shipped records' modules), and XLA's own while loops 2 or 3."""

MAX_RECORD_BYTES = 2 * 2**30
"""The largest tuning-record file (``--layout-records``, ``--tile-records``) ``featurize`` reads: 2 GiB, protobuf's
own limit on a message. The largest real layout file (10,760 configs of 2,251 configurable nodes) would be about
0.5 GB as a record, at the shipped real record's 19 bytes a run node."""

MAX_RECORD_RUNS = 1_000_000
"""The most runs a tuning record (one module's, or one kernel's) may hold: 10 times the most configs of a real
graph (100,040). Counted in the record's bytes before any run is decoded."""

MAX_LAYOUT_CELLS = 100_000_000
"""The most configs times configurable nodes of a layout file ``featurize`` writes (from records or ``--sample``):
4 times the largest real file's 24.2 million (10,760 configs x 2,251 nodes; its ``node_config_feat`` is 1.7 GB of
float32, 72 bytes a cell). Checked before the array is allocated, and on every ``node_config_feat`` read (from the
member's header, before it is inflated)."""

MAX_SAMPLE = 1_000_000
"""The largest ``featurize --sample``: 10 times the most configs of a real graph (100,040; real test graphs hold
1,000 or 1,001). The sampler also stops at the number of distinct configs the program has."""

MAX_INDEX_FILE_BYTES = 32 * 2**20
"""The largest ``--valid-indices`` index file: 32 MiB. The official ones are at most 137 kB (20 graphs x 1,000
indices); one listing every config of a real nlp valid split (1.4 million) would be about 10 MB."""

MAX_INDEX_GRAPHS = 10_000
"""The most graphs an index file may list: the real valid splits hold at most 20 layout graphs per collection."""

MAX_INDEX_ENTRIES = 4_000_000
"""The most config indices an index file may hold (all graphs together): the official files hold 20,000; every
config of a real nlp valid split is 1.4 million."""

MAX_CONFIG_BYTES = 1 * 2**20
"""The largest ``--config`` TOML file: 1 MiB. One setting every hyper-parameter of every model at every level
(per model and per collection) is under 100 kB."""

MAX_CONFIG_KEYS = 10_000
"""The most keys (``=`` signs, counted before parsing) a ``--config`` file may hold: every hyper-parameter of every
model, per model and per collection, is under 1,000."""

# npz files and the data root (issue 50)

MAX_GRAPH_NODES = MAX_PROGRAM_INSTRUCTIONS
"""The most nodes an npz graph file may hold (the rows of ``node_feat`` and ``node_opcode``, the length of
``node_config_ids``, and of ``node_splits`` less one): 500,000, 11 times the largest real layout graph (43,615 nodes),
and as many as ``featurize`` writes from the largest program it reads (:data:`MAX_PROGRAM_INSTRUCTIONS`). Read from
the member's ``.npy`` header, before its data is inflated."""

MAX_GRAPH_EDGES = 32 * MAX_GRAPH_NODES
"""The most edges an npz graph file may hold (the rows of ``edge_index``): 16,000,000, 32 a node at
:data:`MAX_GRAPH_NODES`; the largest real layout graph has 73,881 (1.7 a node). Read from the header, before the data
is inflated."""

MAX_GRAPH_CONFIGS = MAX_RECORD_RUNS
"""The most configs an npz graph file (or its ``secret/`` runtimes) may hold (the rows of ``config_runtime``,
``config_feat``, ``config_runtime_normalizers`` and ``node_config_feat``): 1,000,000, 10 times the most of a real
graph (100,040), and as many as ``featurize`` writes from the largest record it reads (:data:`MAX_RECORD_RUNS`).
``node_config_feat`` is bounded by :data:`MAX_LAYOUT_CELLS` too. Read from the header, before the data is
inflated."""

MAX_NPZ_LOAD_BYTES = 512 * 2**20
"""The most bytes of one npz member read whole into memory (every member but ``node_config_feat``, which is only
ever streamed a block at a time): 512 MiB. The largest real member so read is ``node_feat`` of the largest layout
graph (43,615 x 140 float32, 24 MB); ``node_feat`` at :data:`MAX_GRAPH_NODES` is 280 MB, ``edge_index`` at
:data:`MAX_GRAPH_EDGES` 256 MB."""

MAX_NPZ_MEMBER_BYTES = 8 * 2**30
"""The most bytes any member of an npz file may declare: 8 GiB, above ``node_config_feat`` at :data:`MAX_LAYOUT_CELLS`
(7.2 GB of float32); the largest real member is the 1.7 GB ``node_config_feat`` of the largest real file (24.2
million cells). Checked in the zip directory when the file is opened, and in the member's ``.npy`` header (whose size
the directory's must equal) when the member is, before anything is inflated."""

# Programs (issue 50)

MAX_DIM = 2**40
"""The largest dimension of an array in a program (HLO text, an ``HloModuleProto``, a record's module), and the
largest magnitude of any integer attribute of an instruction (``dimensions=``, window sizes, strides and padding,
slice bounds, group counts, parameter numbers) and of a tile bound in a tile record: 2^40. The largest dim in the
shipped real data is 2,916 (the alexnet graph; 768 in the record's module), and the largest of real models (a
vocabulary, a flattened activation) are millions; an array with one dim of 2^40 elements is a TiB at one byte each,
more than any TPU holds. Checked by the one validation pass over every program read
(:mod:`competition.hlo.check`), before any feature is computed; a value past it is refused naming the computation
and the instruction."""


# Settings (issue 50)

MAX_SEED = 2**31 - 1
"""The largest seed a setting or an option takes (``booster.seed``, ``train.seed``, ``scores.seed``, ``fit.seed``,
``--seed``, ``--world-seeds``; the smallest is 0): LightGBM's seed is a C ``int``, and one range for every seed
refuses a value when it is parsed, whichever model or command would have met it after the work began."""

MAX_DIST_TIMEOUT = 7 * 24 * 3600
"""The longest ``train --dist-timeout``, in seconds: a week. An exchange between processes takes seconds; a wait
longer than any run is a typo, and one past ``datetime.timedelta``'s range would fail only once the processes
start."""

MAX_SHOWN_CHARS = 200
"""The most characters of a value from the command line or a file that a refusal echoes; a longer one is cut, its
length said, so that the refusal stays one readable line."""


def file_size(path: str | os.PathLike[str]) -> int:
    """The size of ``path`` in bytes, from ``os.stat`` (nothing is read).

    Raises:
        OSError: the file cannot be stat'ed (missing, permission denied); the callers' error handling names it.
    """
    return os.stat(path).st_size


def over(value: int, limit: int, name: str, unit: str) -> str | None:
    """The problem of a ``value`` above ``limit`` (the constant ``name``), as the refusals word it: ``"1,234,567
    bytes, more than the limit of 1,048,576 (MAX_CONFIG_BYTES)"``; ``None`` within it."""
    if value <= limit:
        return None
    return f"{value:,} {unit}, more than the limit of {limit:,} ({name})"


def file_over(path: str | os.PathLike[str], limit: int, name: str) -> str | None:
    """:func:`over` for the size of ``path`` (``os.stat``, before reading it)."""
    return over(file_size(path), limit, name, "bytes")


def memory_available() -> int | None:
    """The bytes this process can still allocate, as far as it can tell: the least of the machine's available
    memory (``MemAvailable``), its address-space limit (``RLIMIT_AS``) less its address space, and its cgroup's
    ``memory.max`` less ``memory.current`` (containers, notebooks); ``None`` where none of them is known."""
    found: list[int] = []
    status = _proc_fields("/proc/self/status")
    meminfo = _proc_fields("/proc/meminfo")
    if "MemAvailable" in meminfo:
        found.append(meminfo["MemAvailable"])
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_AS)[0]
        if soft != resource.RLIM_INFINITY and "VmSize" in status:
            found.append(soft - status["VmSize"])
    except (ImportError, OSError, ValueError):
        pass
    try:
        with open("/sys/fs/cgroup/memory.max") as f:
            limit = f.read().strip()
        with open("/sys/fs/cgroup/memory.current") as f:
            current = int(f.read().strip())
        if limit != "max":
            found.append(int(limit) - current)
    except (OSError, ValueError):
        pass
    return max(0, min(found)) if found else None


def _proc_fields(path: str) -> dict[str, int]:
    """The ``Name: N kB`` lines of a ``/proc`` file, in bytes; empty where there is none (not Linux)."""
    out: dict[str, int] = {}
    try:
        with open(path) as f:
            for line in f:
                name, _, value = line.partition(":")
                parts = value.split()
                if len(parts) == 2 and parts[1] == "kB" and parts[0].isdigit():
                    out[name] = int(parts[0]) * 1024
    except OSError:
        pass
    return out
