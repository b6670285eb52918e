"""Labelled: a numpy array with named axes and coordinates, built from a dataset's `dims` attribute.

Just enough of xarray's idea for notebooks on Debian's python3 (which has no xarray): select by name
and label (`loss.sel(rank=1)`), keep the axis names through selections, and turn into a tidy
DataFrame. It deliberately does no arithmetic alignment or broadcasting: take `.values` for maths.
"""
import numpy as np
import pandas as pd


class Labelled:
    """values (ndarray) with dims (axis names) and coords (one label array per axis)."""

    def __init__(self, values, dims, coords=None, name="value", description=""):
        self.values = np.asarray(values)
        self.dims = tuple(dims)
        if len(self.dims) != self.values.ndim:
            raise ValueError(f"{name}: {len(self.dims)} dims {self.dims} for an array of shape {self.values.shape}")
        coords = dict(coords or {})
        self.coords = {}
        for axis, dim in enumerate(self.dims):
            labels = coords.get(dim)
            labels = np.arange(self.values.shape[axis]) if labels is None else np.asarray(labels)
            if labels.shape != (self.values.shape[axis],):
                raise ValueError(f"{name}: coordinate '{dim}' has {labels.shape} labels for an axis of "
                                 f"length {self.values.shape[axis]}")
            self.coords[dim] = labels
        self.name = name
        self.description = description

    @property
    def shape(self):
        return self.values.shape

    @property
    def ndim(self):
        return self.values.ndim

    def __len__(self):
        return len(self.values)

    def __array__(self, dtype=None):
        return self.values if dtype is None else self.values.astype(dtype)

    def __repr__(self):
        axes = ", ".join(f"{d}: {n}" for d, n in zip(self.dims, self.shape))
        return f"<Labelled {self.name} ({axes}) {self.values.dtype}>\n{self.values!r}"

    def axis(self, dim):
        try:
            return self.dims.index(dim)
        except ValueError:
            raise KeyError(f"{self.name} has no axis '{dim}' (axes: {', '.join(self.dims)})") from None

    def isel(self, **indexers):
        """Select by position: an int drops the axis, a slice or a list keeps it; no axis left -> scalar."""
        index = [slice(None)] * self.ndim
        dims, coords = list(self.dims), dict(self.coords)
        for dim, where in indexers.items():
            index[self.axis(dim)] = where
            if np.isscalar(where):
                dims.remove(dim)
                del coords[dim]
            else:
                coords[dim] = self.coords[dim][where]
        if not dims:
            return self.values[tuple(index)]
        return Labelled(self.values[tuple(index)], dims, coords, self.name, self.description)

    def sel(self, **labels):
        """Select by coordinate label (a step number, a layer name, ...): a scalar drops the axis."""
        positions = {}
        for dim, wanted in labels.items():
            coord = self.coords[self.dims[self.axis(dim)]]
            lookup = {v.item() if hasattr(v, "item") else v: i for i, v in enumerate(coord)}
            try:
                if np.isscalar(wanted):
                    positions[dim] = lookup[wanted]
                else:
                    positions[dim] = [lookup[w] for w in wanted]
            except KeyError as missing:
                raise KeyError(f"{self.name}: no {dim} {missing} (have {coord[:8].tolist()}"
                               f"{' ...' if len(coord) > 8 else ''})") from None
        return self.isel(**positions)

    def to_frame(self):
        """Tidy DataFrame: one column per axis (its labels) and one value column named after the array."""
        index = pd.MultiIndex.from_product([self.coords[d] for d in self.dims], names=list(self.dims))
        return pd.DataFrame({self.name: self.values.reshape(-1)}, index=index).reset_index()
