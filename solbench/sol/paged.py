"""Paged KV caches in references that cannot be traced: charge the pages read, not the pool.

A paged-attention workload hands the kernel a page pool (`k_cache [num_pages, page_size, heads,
dim]`) and the list of pages it attends to (`kv_indices [num_kv_indices]`). The pool is sized for a
whole serving batch, often hundreds of times what one call reads. When the reference cannot be
traced offline (its index blobs are absent, so its data-dependent loop has nothing to run on),
charging every declared input would charge the whole pool. Every page a kernel reads is named by
an index, so a pool is read at most at `min(num_kv_indices, num_pages)` pages, each of
`numel / num_pages` elements (page size x heads x head dim). Both numbers are the workload's axes,
known without the blob.

Recognised from the definition alone: a pool is an input whose first axis is named like
`num_pages`; the page list is a 1-D integer input named `*indices` whose axis names something other
than the pool (e.g. `num_kv_indices`). Several page lists (e.g. separate K and V lists) add up.
"""

from __future__ import annotations

import math

from solbench.spec import dtypes

POOL_AXES = ("num_pages", "total_pages", "num_kv_pages")


def _page_lists(definition, shapes: dict) -> list[str]:
    names = []
    for name, spec in definition.inputs.items():
        shape = shapes.get(name)
        if (spec.shape and len(spec.shape) == 1 and shape is not None and name.endswith("indices")
                and dtypes.is_integer_like(spec.dtype) and str(spec.shape[0]) not in POOL_AXES):
            names.append(name)
    return names


def pool_reads(definition, axis_values: dict[str, int]) -> dict[str, tuple[int, str]]:
    """Elements each page pool must be read at, with a note; empty when the problem is not paged."""
    shapes = definition.input_shapes(axis_values)
    lists = _page_lists(definition, shapes)
    if not lists:
        return {}
    pages_named = sum(math.prod(shapes[n]) for n in lists)
    reads = {}
    for name, spec in definition.inputs.items():
        shape = shapes.get(name)
        if not spec.shape or shape is None or str(spec.shape[0]) not in POOL_AXES or not shape[0]:
            continue
        numel = math.prod(shape)
        pages = min(pages_named, shape[0])
        elements = pages * (numel // shape[0])
        reads[name] = (elements, f"paged pool {name}: {pages} of {shape[0]} pages read "
                                 f"({' + '.join(lists)} name the pages; {elements} of {numel} elements)")
    return reads
