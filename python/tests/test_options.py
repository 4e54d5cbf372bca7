"""Options from Python: one kiln::LoaderOptions / kiln::PackOptions, checked once in C++ with
the command line's messages; bad arguments are kiln exceptions, never raw pybind11 errors."""
import os
import subprocess

import numpy as np
import pytest

import kiln
from kiln import _core

from conftest import SAMPLES


def raises_kiln(exc_type, match, fn, *args, **kwargs):
    """Calls fn, expecting exc_type (a kiln.KilnError subclass) with `match` in its message."""
    with pytest.raises(exc_type, match=match) as info:
        fn(*args, **kwargs)
    assert isinstance(info.value, kiln.KilnError), type(info.value).__mro__
    return info.value


@pytest.mark.parametrize("kwargs, match", [
    ({"batch_size": 2**40}, r"batch_size 1099511627776 is out of range \[0, 4294967295\]"),
    ({"batch_size": -1}, r"batch_size -1 is out of range"),
    ({"batch_size": 0}, r"batch_size 0 must be at least 1"),
    ({"prefetch": 0}, r"prefetch 0 must be in \[1, 64\]"),
    ({"prefetch": 65}, r"prefetch 65 must be in \[1, 64\]"),
    ({"num_threads": 257}, r"num_threads 257 must be at most 256"),
    ({"seed": -5}, r"seed -5 is out of range \[0, 18446744073709551615\]"),
    ({"seed": 2**64}, r"seed 18446744073709551616 is out of range"),
    ({"rank": 2, "world_size": 2}, r"rank 2 must be below world_size 2"),
    ({"world_size": 0, "rank": 0}, r"world_size 0 must be at least 1"),
    ({"block_bytes": 0}, r"block_bytes 0 must be in \[1, 2\^40\]"),
    ({"window": 0}, r"shuffle_window 0 must be in \[1, 1048576\] blocks"),
    ({"read_ahead_bytes": (1 << 32) + 1}, r"read_ahead_bytes 4294967297 must be at most 4 GiB"),
    ({"tail": "wrap"}, r"tail 'wrap' must be short, drop or pad"),
    ({"shuffle": "random"}, r"shuffle mode 'random'"),
    ({"crop": (-1, 3)}, r"crop_height -1 is out of range"),
])
def test_loader_values_out_of_range(packed, kwargs, match):
    e = raises_kiln(kiln.InvalidArgumentError, match, kiln.Loader, packed,
                    **dict({"num_threads": 1}, **kwargs))
    assert isinstance(e, ValueError) and e.code == "InvalidArgument"


@pytest.mark.parametrize("kwargs, match", [
    ({"batch_size": "8"}, r"batch_size must be an int, got str"),
    ({"batch_size": 8.0}, r"batch_size must be an int, got float"),
    ({"batch_size": True}, r"batch_size must be an int, got bool"),
    ({"seed": None}, r"seed must be an int, got NoneType"),
    ({"drop_last": 1}, r"drop_last must be a bool, got int"),
    ({"flip": "yes"}, r"flip must be a bool, got str"),
    ({"tail": 3}, r"tail must be a str, got int"),
    ({"shuffle": 1}, r"shuffle must be a str, got int"),
    ({"crop": "24"}, r"crop_height must be an int, got str"),
    ({"copy": "no"}, r"copy must be a bool, got str"),
])
def test_loader_values_of_the_wrong_type(packed, kwargs, match):
    e = raises_kiln(kiln.ArgumentTypeError, match, kiln.Loader, packed,
                    **dict({"num_threads": 1}, **kwargs))
    assert isinstance(e, TypeError) and isinstance(e, kiln.InvalidArgumentError)


def test_path_of_the_wrong_type():
    raises_kiln(kiln.ArgumentTypeError, "path must be a str or os.PathLike, got int",
                kiln.Loader, 5)
    raises_kiln(kiln.ArgumentTypeError, "path must be a str or os.PathLike, got NoneType",
                kiln.Dataset, None)


def test_numpy_integers_and_pathlike_are_accepted(packed, tmp_path):
    import pathlib
    loader = kiln.Loader(pathlib.Path(packed), batch_size=np.int64(100), num_threads=np.uint8(1),
                         seed=np.int32(3), crop=np.int16(20))
    assert loader.batch_size == 100 and len(loader) == 10
    assert loader.sample_shape == (20, 20, 1)
    assert loader.options.seed == 3 and loader.options.crop_width == 20


def test_loader_options_is_the_cpp_struct():
    o = _core.LoaderOptions()
    # The defaults are kiln::LoaderOptions' own (reader/loader.h).
    assert (o.batch_size, o.shuffle, o.prefetch, o.num_threads, o.tail, o.device) == \
        (256, "exact", 2, 0, "short", -1)
    assert o.block_bytes == 4 << 20 and o.shuffle_window == 16 and o.read_ahead_bytes == 16 << 20
    o.batch_size = 2**32 - 1          # the largest uint32 is stored as is
    assert o.batch_size == 2**32 - 1
    o.seed = 2**64 - 1                # and the largest uint64
    assert o.seed == 2**64 - 1
    copy = o.copy()
    copy.seed = 1
    assert o.seed == 2**64 - 1
    o.validate()
    o.prefetch = 0
    raises_kiln(kiln.InvalidArgumentError, r"prefetch 0 must be in \[1, 64\]", o.validate)
    raises_kiln(kiln.ArgumentTypeError, "resume must be bytes", setattr, o, "resume", "x")


def test_bench_cli_reports_the_same_message(packed):
    """kiln bench and kiln.Loader go through ValidateLoaderOptions: one message."""
    cli = os.environ.get("KILN_CLI")
    if not cli or not os.path.exists(cli):
        pytest.skip("KILN_CLI (the kiln binary) not given")
    out = subprocess.run([cli, "bench", packed, "--prefetch", "0", "--epochs", "1"],
                         capture_output=True, text=True)
    assert out.returncode != 0
    with pytest.raises(kiln.InvalidArgumentError) as info:
        kiln.Loader(packed, prefetch=0)
    assert str(info.value) in out.stderr, out.stderr


def test_load_state_dict_bad_values(packed):
    loader = kiln.Loader(packed, batch_size=100, num_threads=1)
    good = loader.state_dict()
    for field, value, exc, match in [
        ("samples_consumed", 2**70, kiln.InvalidArgumentError,
         r"field 'samples_consumed' 1180591620717411303424 is out of range"),
        ("samples_consumed", -1, kiln.InvalidArgumentError,
         r"field 'samples_consumed' -1 is out of range"),
        ("epoch", "3", kiln.ArgumentTypeError, r"field 'epoch' must be an int, got str"),
        ("batch_size", 2**32, kiln.InvalidArgumentError, r"field 'batch_size' 4294967296"),
        ("drop_last", "no", kiln.ArgumentTypeError, r"field 'drop_last' must be a bool"),
        ("crop", 5, kiln.ArgumentTypeError, r"field 'crop' must be \[height, width\]"),
        ("crop", [0, "0"], kiln.ArgumentTypeError, r"field 'crop'\[1\] must be an int"),
        ("shuffle", None, kiln.ArgumentTypeError, r"field 'shuffle' must be a str"),
        ("dataset_fingerprint", 7, kiln.ArgumentTypeError, r"must be a str, got int"),
    ]:
        bad = dict(good, **{field: value})
        raises_kiln(exc, match, loader.load_state_dict, bad)
    raises_kiln(kiln.ArgumentTypeError, "expects a dict", loader.load_state_dict, [1])
    loader.load_state_dict(good)  # still usable after the refusals
    assert sum(len(y) for _, y in loader) == 1000


def test_set_epoch_and_key_bad_values(packed):
    loader = kiln.Loader(packed, batch_size=100, num_threads=1)
    raises_kiln(kiln.InvalidArgumentError, "epoch -1 is out of range", loader.set_epoch, -1)
    raises_kiln(kiln.ArgumentTypeError, "epoch must be an int", loader.set_epoch, "1")
    raises_kiln(kiln.ArgumentTypeError, "index must be an int", loader.key, "1")
    raises_kiln(kiln.OutOfRangeError, "", loader.key, 1000)


@pytest.mark.parametrize("kwargs, exc, match", [
    ({"size": 2**33}, kiln.InvalidArgumentError, r"size 8589934592 is out of range"),
    ({"size": (28, 28, 1)}, kiln.InvalidArgumentError, r"size must be an int, \(height, width\)"),
    ({"size": "0x5"}, kiln.InvalidArgumentError, r"size"),
    ({"channels": 2}, kiln.InvalidArgumentError, r"channels"),
    ({"threads": -1}, kiln.InvalidArgumentError, r"threads -1 is out of range"),
    ({"threads": "2"}, kiln.ArgumentTypeError, r"threads must be an int, got str"),
    ({"mean": 0.5}, kiln.InvalidArgumentError,
     r"--mean and --std apply to float16 and float32 output only; uint8 samples are stored "
     r"unnormalised: add --dtype float16 \(or float32\).*normalize="),
    ({"mean": (0.1, 0.2, 0.3), "dtype": "float32", "channels": 1}, kiln.InvalidArgumentError,
     r"--channels 1 takes one --mean and one --std value"),
    ({"mean": (0.1, 0.2), "dtype": "float32"}, kiln.InvalidArgumentError,
     r"mean takes 1 or 3 values, got 2"),
    ({"std": "0.5", "dtype": "float32"}, kiln.ArgumentTypeError, r"std must be a number"),
    ({"std": 0.0, "dtype": "float32"}, kiln.InvalidArgumentError, r"std\[0\] is 0"),
    ({"shard_size": "lots"}, kiln.InvalidArgumentError, r"lots"),
    ({"shard_size": -1}, kiln.InvalidArgumentError, r"shard_size -1 is out of range"),
    ({"compress": "zstd:99"}, kiln.InvalidArgumentError, r"zstd"),
    ({"on_error": "ignore"}, kiln.InvalidArgumentError, r"on_error 'ignore' must be skip or fail"),
    ({"crop": "left"}, kiln.InvalidArgumentError, r"crop 'left' must be center or none"),
    ({"layout": "whc"}, kiln.InvalidArgumentError, r"whc"),
    ({"dtype": "int8"}, kiln.InvalidArgumentError, r"int8"),
    ({"max_pixels": -1}, kiln.InvalidArgumentError, r"max_pixels -1 is out of range"),
    ({"shuffle_seed": 1.5}, kiln.ArgumentTypeError, r"shuffle_seed must be an int"),
    ({"overwrite": "yes"}, kiln.ArgumentTypeError, r"overwrite must be a bool"),
    ({"resize": 10}, kiln.InvalidArgumentError, r"--resize 10 is smaller than the crop 28x28"),
])
def test_pack_bad_values(tmp_path, kwargs, exc, match):
    args = dict(size=28, channels=1, threads=1)
    args.update(kwargs)
    raises_kiln(exc, match, kiln.pack, SAMPLES, str(tmp_path / "out"), **args)
    assert not (tmp_path / "out").exists()


def test_pack_cli_reports_the_same_message(tmp_path):
    """kiln pack and kiln.pack go through ValidatePackOptions: one message."""
    cli = os.environ.get("KILN_CLI")
    if not cli or not os.path.exists(cli):
        pytest.skip("KILN_CLI (the kiln binary) not given")
    out = subprocess.run([cli, "pack", SAMPLES, str(tmp_path / "a"), "--size", "28",
                          "--resize", "10"], capture_output=True, text=True)
    assert out.returncode != 0
    with pytest.raises(kiln.InvalidArgumentError) as info:
        kiln.pack(SAMPLES, str(tmp_path / "b"), size=28, resize=10)
    assert str(info.value) in out.stderr, out.stderr


def test_pack_options_fields():
    from kiln import _tools
    o = _tools.PackOptions()
    assert o.size == (224, 224) and o.channels == 3 and o.dtype == "uint8"
    assert o.shard_size == 128 << 20 and o.max_pixels == 178956970 and o.shuffle_seed is None
    o.size = "32x48"
    assert (o.height, o.width) == (32, 48)
    o.mean = 0.5
    assert o.mean == (0.5, 0.5, 0.5)
    o.shard_size = "64MiB"
    assert o.shard_size == 64 << 20
    o.compress = "zstd:3"
    assert o.compress == "zstd:3"
    assert o.exact_decode is False
    o.exact_decode = True
    assert o.exact_decode is True


def _properties(cls):
    """The names of a pybind11 class's properties."""
    return sorted(n for n in dir(cls) if isinstance(getattr(cls, n, None), property))


def test_loader_defaults_are_the_cpp_defaults():
    """kiln.Loader's and kiln.loader_options()'s keyword defaults are kiln::LoaderOptions' own
    (reader/loader.h): fails when one side's default changes alone."""
    import inspect
    loader = inspect.signature(kiln.Loader.__init__).parameters
    options = inspect.signature(kiln.loader_options).parameters
    for name, p in options.items():
        assert name in loader, f"kiln.Loader has no keyword {name}"
        assert loader[name].default == p.default, \
            f"{name}: kiln.Loader's default {loader[name].default!r}, loader_options' {p.default!r}"
    # rank and world_size default to None (the launcher's environment): give C++'s.
    ours = kiln.loader_options(rank=0, world_size=1)
    cpp = _core.LoaderOptions()
    names = _properties(_core.LoaderOptions)
    assert "batch_size" in names and "tail" in names, names
    for name in names:
        assert getattr(ours, name) == getattr(cpp, name), \
            f"{name}: Python's default {getattr(ours, name)!r}, C++'s {getattr(cpp, name)!r}"


def test_pack_keywords_are_the_option_table():
    """kiln.pack()'s parameters, kiln._tools.PackOptions' properties and the stub's fields are
    the pack option table's names (tools/pack/pack_option_table.h)."""
    import inspect
    import kiln._tools as _tools
    table = [row["name"] for row in _tools.pack_option_table() if row["name"]]
    assert len(table) == len(set(table)) and "shard_size" in table, table
    assert sorted(inspect.signature(kiln.pack).parameters) == sorted(table)
    # height and width: size's two halves, settable one by one.
    assert _properties(_tools.PackOptions) == sorted(table + ["height", "width"])
    stub = os.path.join(os.path.dirname(kiln.__file__), "_tools.pyi")
    with open(stub) as f:
        text = f.read().split("class PackOptions:")[1].split("def __init__")[0]
    fields = sorted(line.split(":")[0].strip() for line in text.splitlines()
                    if ":" in line and not line.strip().startswith(("#", '"')))
    assert fields == sorted(table + ["height", "width"])


def test_pack_defaults_are_the_cpp_defaults():
    """Each kiln.pack() keyword default, set on a kiln._tools.PackOptions, leaves that field at
    kiln pack's default (kiln::DefaultPackOptions): fails when one side changes alone. A default
    of None means "the C++ default" and is not compared."""
    import inspect
    from kiln import _tools
    defaults = _tools.PackOptions()
    compared = []
    for name, p in inspect.signature(kiln.pack).parameters.items():
        if p.default is inspect.Parameter.empty or p.default is None:
            continue
        o = _tools.PackOptions()
        setattr(o, name, p.default)
        assert getattr(o, name) == getattr(defaults, name), \
            f"{name}: kiln.pack's default {p.default!r} is {getattr(o, name)!r}, " \
            f"C++'s {getattr(defaults, name)!r}"
        compared.append(name)
    assert "size" in compared and "shard_size" in compared and "feature_image" in compared
