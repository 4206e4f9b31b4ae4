#!/usr/bin/env python3
"""Writes the .npy files TestNumpyFiles reads, with NumPy itself."""
import numpy as np

for dt in ("uint16", "int32", "int64", "uint32"):
    np.save(f"tokens_{dt}.npy", np.arange(64, dtype=dt))
np.save("images_f32.npy", (np.arange(3 * 2 * 4 * 4, dtype=np.float32) / 10).reshape(3, 2, 4, 4))
np.save("labels_f32.npy", np.arange(3, dtype=np.int64))
