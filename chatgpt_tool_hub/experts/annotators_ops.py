"""Image operations of the annotator tools, in numpy alone (no OpenCV): Canny edges, Hough line segments,
Gaussian blur, HED scribbles and surface normals from depth.

They reproduce what ControlNet's annotators compute with OpenCV, so their maps are what the ControlNet
models were trained on:

* :func:`canny` is ``cv2.Canny(rgb, low, high)`` (Visual ChatGPT's ``Image2Canny``): 3x3 Sobel per colour
  channel (the channel with the largest gradient wins), L1 magnitude, OpenCV's non-maximum suppression
  and 8-connected hysteresis, no blur unless asked;
* :func:`hough_segments` finds straight segments on such an edge map (a numpy Hough transform, then a
  least-squares fit of each run of pixels on a peak line), the stand-in for M-LSD that needs no weights;
* :func:`scribble` is controlnet_aux's ``HEDdetector(..., scribble=True)`` post-processing: directional
  non-maximum suppression at 127 after a blur of sigma 3, then a blur of sigma 3 thresholded at 4;
* :func:`normals_from_depth` is ControlNet's MiDaS normal annotator: Sobel gradients of the (closer =
  larger) depth in x and y, a constant z, background below a share of the depth range set flat.

Arrays are ``numpy`` arrays; images come in as ``HxWx3`` ``uint8`` RGB and maps go out as ``HxW`` ``uint8``.
numpy is imported inside the functions, like every heavy import of the expert tools.
"""

from __future__ import annotations

from typing import Any, Literal

__all__ = ["canny", "hough_segments", "gaussian_blur", "scribble", "normals_from_depth", "sobel"]

_TAN_22_5 = 0.4142135623730950

Border = Literal["edge", "reflect", "symmetric", "wrap", "constant"]  # the numpy pad modes a border may take


def _shift(array: Any, dy: int, dx: int, fill: float = 0) -> Any:
    """``array`` moved by (dy, dx): ``out[y, x] = array[y - dy, x - dx]``, ``fill`` where nothing moved in."""
    import numpy as np

    out = np.full_like(array, fill)
    h, w = array.shape[:2]
    ys, yd = (slice(0, h - dy), slice(dy, h)) if dy >= 0 else (slice(-dy, h), slice(0, h + dy))
    xs, xd = (slice(0, w - dx), slice(dx, w)) if dx >= 0 else (slice(-dx, w), slice(0, w + dx))
    out[yd, xd] = array[ys, xs]
    return out


def sobel(array: Any, border: Border = "edge") -> tuple[Any, Any]:
    """The 3x3 Sobel derivatives ``(d/dx, d/dy)`` of a 2-D float array (``border``: numpy's pad mode;
    ``"edge"`` is OpenCV's BORDER_REPLICATE, ``"reflect"`` its default BORDER_REFLECT_101)."""
    import numpy as np

    p = np.pad(array, 1, mode=border)
    gx = (p[:-2, 2:] + 2 * p[1:-1, 2:] + p[2:, 2:]) - (p[:-2, :-2] + 2 * p[1:-1, :-2] + p[2:, :-2])
    gy = (p[2:, :-2] + 2 * p[2:, 1:-1] + p[2:, 2:]) - (p[:-2, :-2] + 2 * p[:-2, 1:-1] + p[:-2, 2:])
    return gx, gy


def gaussian_blur(array: Any, sigma: float) -> Any:
    """A 2-D float array blurred by a Gaussian of ``sigma`` pixels (OpenCV's kernel size, reflected border)."""
    import numpy as np

    array = np.asarray(array, dtype=np.float32)
    if sigma <= 0:
        return array.copy()
    radius = max(1, int(round(sigma * 4)))  # cv2: ksize = round(sigma * 8 + 1) | 1 for float images
    taps = np.arange(-radius, radius + 1, dtype=np.float64)
    kernel = np.exp(-(taps ** 2) / (2 * sigma ** 2))
    kernel = (kernel / kernel.sum()).astype(np.float32)
    out = array
    for axis in (0, 1):
        size = out.shape[axis]
        pad = [(0, 0), (0, 0)]
        pad[axis] = (radius, radius)
        padded = np.pad(out, pad, mode="reflect" if size > 1 else "edge")
        acc = np.zeros_like(out)
        for i, weight in enumerate(kernel):
            acc += weight * (padded[i:i + size] if axis == 0 else padded[:, i:i + size])
        out = acc
    return out


def canny(rgb: Any, low: float = 100, high: float = 200, blur: float = 0.0) -> Any:
    """Canny edges of an ``HxWx3`` (or ``HxW``) uint8 image: ``HxW`` bool, like ``cv2.Canny(rgb, low, high)``."""
    import numpy as np

    image = np.asarray(rgb, dtype=np.float32)
    if image.ndim == 2:
        image = image[:, :, None]
    low, high = sorted((float(low), float(high)))
    best_mag: Any = None  # the per-pixel winner over the channels (numpy arrays once the first channel is in)
    best_dx: Any = None
    best_dy: Any = None
    for channel in range(image.shape[2]):
        plane = gaussian_blur(image[:, :, channel], blur) if blur > 0 else image[:, :, channel]
        dx, dy = sobel(plane, "edge")
        mag = np.abs(dx) + np.abs(dy)
        if best_mag is None:
            best_mag, best_dx, best_dy = mag, dx, dy
        else:
            wins = mag > best_mag
            best_mag = np.where(wins, mag, best_mag)
            best_dx = np.where(wins, dx, best_dx)
            best_dy = np.where(wins, dy, best_dy)
    mag, dx, dy = best_mag, best_dx, best_dy
    ax, ay = np.abs(dx), np.abs(dy)
    horizontal = ay < ax * _TAN_22_5  # the gradient points along x: compare left and right
    vertical = ay > ax * (1 / _TAN_22_5)
    diagonal = ~(horizontal | vertical)
    left, right = _shift(mag, 0, 1), _shift(mag, 0, -1)
    up, down = _shift(mag, 1, 0), _shift(mag, -1, 0)
    same_sign = (dx * dy) >= 0  # gradient along the main diagonal (down-right) or the other one
    up_left, down_right = _shift(mag, 1, 1), _shift(mag, -1, -1)
    up_right, down_left = _shift(mag, 1, -1), _shift(mag, -1, 1)
    keep = (horizontal & (mag > left) & (mag >= right)) | (vertical & (mag > up) & (mag >= down))
    keep |= diagonal & same_sign & (mag > up_left) & (mag > down_right)
    keep |= diagonal & ~same_sign & (mag > up_right) & (mag > down_left)
    keep &= mag > low
    return _hysteresis(keep & (mag > high), keep)


def _hysteresis(strong: Any, candidates: Any) -> Any:
    """The candidate pixels 8-connected (through candidates) to a strong one."""
    import numpy as np

    edges = strong & candidates
    frontier = edges
    while frontier.any():
        grown = np.zeros_like(frontier)
        for dy in (-1, 0, 1):
            for dx in (-1, 0, 1):
                if dy or dx:
                    grown |= _shift(frontier, dy, dx, False)
        frontier = grown & candidates & ~edges
        edges = edges | frontier
    return edges


def hough_segments(edges: Any, *, min_length: int = 20, max_gap: int = 4, max_lines: int = 200,
                   tolerance: float = 1.5, theta_bins: int = 180,
                   merge: float = 2.5) -> list[tuple[float, float, float, float]]:
    """Straight segments ``(x0, y0, x1, y1)`` along the pixels of a bool edge map, longest first.

    A Hough transform over ``theta_bins`` angles votes for lines; the strongest line's pixels (within
    ``tolerance`` px) are split where they leave gaps longer than ``max_gap``, each run of at least
    ``min_length`` px is fitted by least squares, and its pixels stop voting. Repeats up to ``max_lines``
    times or until no line has ``min_length`` votes. A segment that runs alongside a longer one within
    ``merge`` px (the other edge of a thin line or stroke) is dropped.
    """
    import numpy as np

    ys, xs = np.nonzero(np.asarray(edges, dtype=bool))
    if xs.size == 0:
        return []
    xs, ys = xs.astype(np.float32), ys.astype(np.float32)
    h, w = np.asarray(edges).shape[:2]
    thetas = np.arange(theta_bins, dtype=np.float64) * (np.pi / theta_bins)
    cos, sin = np.cos(thetas).astype(np.float32), np.sin(thetas).astype(np.float32)
    offset = int(np.ceil(np.hypot(h, w))) + 1
    width = 2 * offset + 1

    def bins(px: Any, py: Any) -> Any:
        rho = np.rint(px[:, None] * cos[None, :] + py[:, None] * sin[None, :]).astype(np.int64) + offset
        return (rho * theta_bins + np.arange(theta_bins)[None, :]).ravel()

    votes = np.zeros(width * theta_bins, dtype=np.int64)
    for start in range(0, xs.size, 4096):  # bounded memory on busy edge maps
        votes += np.bincount(bins(xs[start:start + 4096], ys[start:start + 4096]), minlength=votes.size)
    active = np.ones(xs.size, dtype=bool)
    segments: list[tuple[float, float, float, float, float]] = []
    min_length = max(2, int(min_length))
    for _ in range(max(0, int(max_lines)) * 4):  # each round finds a segment or clears a peak
        if len(segments) >= max_lines:
            break
        peak = int(np.argmax(votes))
        if votes[peak] < min_length:
            break
        rho_bin, theta = divmod(peak, theta_bins)
        rho = rho_bin - offset
        distance = np.abs(xs * cos[theta] + ys * sin[theta] - rho)
        on_line = np.nonzero(active & (distance <= tolerance))[0]
        along = -xs[on_line] * sin[theta] + ys[on_line] * cos[theta]
        order = np.argsort(along)
        on_line, along = on_line[order], along[order]
        breaks = np.nonzero(np.diff(along) > max_gap)[0] + 1
        used = []
        for run in np.split(np.arange(on_line.size), breaks):
            if run.size and along[run[-1]] - along[run[0]] + 1 >= min_length:
                found = _fit_segment(xs[on_line[run]], ys[on_line[run]])
                if found is not None:
                    segments.append(found)
                    used.append(on_line[run])
        if not used:
            votes[peak] = 0  # its pixels are scattered: no segment here
            continue
        gone = np.concatenate(used)
        active[gone] = False
        votes -= np.bincount(bins(xs[gone], ys[gone]), minlength=votes.size)
    segments.sort(key=lambda s: -s[4])
    kept: list[tuple[float, float, float, float, float]] = []
    for segment in segments:
        if not any(_covers(longer, segment, merge) for longer in kept):
            kept.append(segment)
    return [s[:4] for s in kept[:max_lines]]


def _covers(longer: tuple[float, ...], shorter: tuple[float, ...], distance: float) -> bool:
    """Whether ``shorter`` runs beside ``longer`` (within ``distance`` px, nearly parallel, mostly alongside it):
    the two edges Canny finds on either side of a thin line are one line."""
    import numpy as np

    if distance <= 0:
        return False
    a, b = np.array(longer[:2]), np.array(longer[2:4])
    p, q = np.array(shorter[:2]), np.array(shorter[2:4])
    axis = (b - a) / max(float(np.hypot(*(b - a))), 1e-9)
    normal = np.array([-axis[1], axis[0]])
    if max(abs(float((p - a) @ normal)), abs(float((q - a) @ normal))) > distance:
        return False
    t0, t1 = sorted((float((p - a) @ axis), float((q - a) @ axis)))
    length = float(np.hypot(*(b - a)))
    overlap = min(t1, length) - max(t0, 0.0)
    return overlap >= 0.5 * max(t1 - t0, 1e-9)


def _fit_segment(px: Any, py: Any) -> tuple[float, float, float, float, float] | None:
    """The least-squares segment through points: its two end points and its length."""
    import numpy as np

    cx, cy = float(px.mean()), float(py.mean())
    points = np.stack([px - cx, py - cy], axis=1)
    _, _, vt = np.linalg.svd(points, full_matrices=False)
    direction = vt[0]
    t = points @ direction
    length = float(t.max() - t.min())
    if length <= 0:
        return None
    x0, y0 = cx + direction[0] * t.min(), cy + direction[1] * t.min()
    x1, y1 = cx + direction[0] * t.max(), cy + direction[1] * t.max()
    return float(x0), float(y0), float(x1), float(y1), length


def scribble(soft_edges: Any) -> Any:
    """Scribble lines (``HxW`` uint8, 0 or 255) from a HED soft-edge map, as controlnet_aux's HED scribble."""
    import numpy as np

    blurred = gaussian_blur(np.asarray(soft_edges, dtype=np.float32), 3.0)
    thin = np.zeros_like(blurred)
    for dy, dx in ((0, 1), (1, 0), (1, 1), (1, -1)):  # the four line-shaped dilation kernels
        neighbourhood = np.maximum(np.maximum(_shift(blurred, dy, dx, -np.inf), blurred),
                                   _shift(blurred, -dy, -dx, -np.inf))
        local_max = neighbourhood == blurred
        thin[local_max] = blurred[local_max]
    lines = np.where(thin > 127, 255.0, 0.0).astype(np.float32)
    spread = gaussian_blur(lines, 3.0)
    return np.where(spread > 4, 255, 0).astype(np.uint8)


def normals_from_depth(depth: Any, *, background: float = 0.4, strength: float = 1.0) -> Any:
    """A normal map (``HxWx3`` uint8 RGB) from a relative depth map where larger values are closer.

    As ControlNet's MiDaS normal annotator: ``x`` and ``y`` are the Sobel derivatives of the depth
    (right and down), ``z`` is the constant 2π, the vector is normalised and mapped from [-1, 1] to
    [0, 255]; pixels whose depth is below ``background`` of the depth range get ``x = y = 0``. The depth
    is first scaled so that its range spans the image's longer side in pixels times ``strength`` (the
    raw values of models differ by orders of magnitude; MiDaS' are of that size at its 384-512 px inputs).
    A surface that comes closer towards the right is red (R > 128), towards the bottom green (G > 128).
    """
    import numpy as np

    depth = np.asarray(depth, dtype=np.float64)
    low, high = float(depth.min()), float(depth.max())
    share = (depth - low) / (high - low) if high > low else np.zeros_like(depth)
    scaled = share * (max(depth.shape) * float(strength))
    x, y = sobel(scaled, "reflect")
    flat = share < float(background)
    x[flat] = 0
    y[flat] = 0
    z = np.full_like(x, 2 * np.pi)
    normal = np.stack([x, y, z], axis=2)
    normal /= np.sqrt((normal ** 2).sum(axis=2, keepdims=True))
    return (normal * 127.5 + 127.5).clip(0, 255).astype(np.uint8)
