"""Writes the .npy files that sparse/npy_test.go reads, with numpy itself.

Run from this directory with any numpy >= 1.17 (1.24.2 was used):

    python3 gen.py
"""
import numpy as np

coords = np.array([[0, 1, 2, 3], [1, 4, 5, 6], [2, 7, 8, 9]], dtype="<i4")
feats = np.array([[0.5, -1.25], [3.0, 1e-3], [-7.0, 2.5e10]])

np.save("coords_i4.npy", coords)
np.save("coords_i8_fortran.npy", np.asfortranarray(coords.astype("<i8")))
np.save("coords_i4_big_endian.npy", coords.astype(">i4"))
np.save("coords_empty.npy", np.zeros((0, 4), dtype=np.int32))
np.save("coords_f4.npy", coords.astype(np.float32))
np.save("coords_3cols.npy", coords[:, 1:])
np.save("feats_f4.npy", feats.astype(np.float32))
np.save("feats_f8_fortran.npy", np.asfortranarray(feats))
np.save("feats_f8_big_endian.npy", feats.astype(">f8"))
np.save("feats_1d_f8.npy", feats[:, 0].copy())
np.save("feats_f2.npy", np.ones((3, 2), dtype=np.float16))
np.save("feats_empty.npy", np.zeros((0, 5), dtype=np.float32))
with open("coords_v2.npy", "wb") as f:
    np.lib.format.write_array(f, coords, version=(2, 0))
with open("coords_v3.npy", "wb") as f:
    np.lib.format.write_array(f, coords, version=(3, 0))
with open("stream.npy", "wb") as f:  # two arrays, one after the other
    np.save(f, coords)
    np.save(f, feats.astype(np.float32))
