# Type stub of kiln._tools (python/kiln_tools_module.cc): the converter, for kiln.pack().
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

class PackOptions:
    """kiln::PackOptions (tools/pack/pack_options.h), field by field, with `kiln pack`'s defaults."""
    input: str
    output: str
    root: str
    # Read as (height, width); set from an int, a pair or "HxW" (mypy 1.0 has no setter types).
    size: Union[Tuple[int, int], int, Sequence[int], str]
    height: int
    width: int
    channels: int
    resize: int
    crop: str
    layout: str
    dtype: str
    # Read as 3 floats; set from a number or 1 or 3 of them.
    mean: Union[Tuple[float, float, float], float, Sequence[float]]
    std: Union[Tuple[float, float, float], float, Sequence[float]]
    format: str
    # Read as bytes; set from an int or text such as "64MiB".
    shard_size: Union[int, str]
    compress: str
    threads: int
    shuffle_seed: Optional[int]
    on_error: str
    max_pixels: int
    overwrite: bool
    resume: bool
    exact_decode: bool
    codec: str
    max_side: int
    image_ext: str
    label_from: str
    feature_image: str
    feature_label: str
    feature_key: str
    def __init__(self) -> None: ...
    def validate(self) -> None: ...

def pack_json(options: PackOptions) -> str: ...
# kiln::PackOptionTable(): one dict per option (name, flag, part_key, manifest_key, fingerprinted).
def pack_option_table() -> List[Dict[str, Any]]: ...
