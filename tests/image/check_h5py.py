"""check_h5py.py <image_sample> <file> <reprise version>: h5py reads an image
that reprise wrote with the right names (in the order added), little-endian
dtypes, shapes, values and attributes, and sees the chunks and fill value 0."""

import subprocess
import sys

try:
    import h5py
    import numpy as np
except ImportError as error:
    sys.exit(f"check_h5py: {error}: install h5py into .venv (scripts/bootstrap.sh does)")

sample, path, version = sys.argv[1:4]
subprocess.run([sample, path], check=True)

with h5py.File(path, "r") as image:
    root = image.attrs
    assert root["reprise_format"] == 1 and root["reprise_format"].dtype == np.dtype("<u4"), root["reprise_format"]
    assert root["reprise_version"] == version.encode(), root["reprise_version"]
    assert root["original_rank"] == 2 and root["original_rank"].dtype == np.dtype("<i4")
    assert root["world_size"] == 4
    assert root["checkpoint_id"] == 7 and root["checkpoint_id"].dtype == np.dtype("<u8")
    assert root["unix_time"] > 1.7e9 and root["unix_time"].dtype == np.dtype("<f8")

    state = image["state"]
    assert list(state) == ["grid", "counts", "blob"], list(state)

    grid = state["grid"]
    assert grid.dtype.str == "<f8" and grid.shape == (3, 4), (grid.dtype.str, grid.shape)
    assert (grid[()] == np.arange(12, dtype="<f8").reshape(3, 4) + 0.5).all(), grid[()]
    assert grid.chunks == (3, 4) and grid.fillvalue == 0, (grid.chunks, grid.fillvalue)
    assert grid.attrs["element_type"] == b"float64"

    counts = state["counts"]
    assert counts.dtype.str == "<i4" and counts.shape == (4,), (counts.dtype.str, counts.shape)
    assert counts[()].tolist() == [-3, 0, 7, 2147483647], counts[()]
    assert counts.attrs["element_type"] == b"int32"

    blob = state["blob"]
    assert blob.dtype.str == "|u1" and blob.shape == (20,), (blob.dtype.str, blob.shape)
    assert blob[()].tobytes() == b"reprise image sample"
    assert blob.attrs["element_type"] == b"bytes"
    assert blob.attrs["checksum"].dtype == np.dtype("<u8")

print("check_h5py: h5py", h5py.__version__, "reads the image with its names, types, shapes, values and attributes")
