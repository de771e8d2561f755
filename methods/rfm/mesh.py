"""General geometries: the spectral (biharmonic) premetric on a triangle mesh (RFM section 3.2).

d²(x, y) = Σ_i (φ_i(x) − φ_i(y))² / λ_i² over the k smallest non-trivial eigenpairs of the
cotangent Laplacian (L φ = λ M φ, M the lumped mass matrix); φ is linear inside each face.
There is no closed-form path: x_t follows the premetric field by projected Euler steps.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from scipy.sparse.linalg import eigsh


def icosphere(subdivisions: int = 2) -> tuple[np.ndarray, np.ndarray]:
    """Vertices (V, 3) on the unit sphere and faces (F, 3) of a subdivided icosahedron."""
    t = (1 + 5 ** 0.5) / 2
    verts = [(-1, t, 0), (1, t, 0), (-1, -t, 0), (1, -t, 0), (0, -1, t), (0, 1, t), (0, -1, -t), (0, 1, -t),
             (t, 0, -1), (t, 0, 1), (-t, 0, -1), (-t, 0, 1)]
    faces = [(0, 11, 5), (0, 5, 1), (0, 1, 7), (0, 7, 10), (0, 10, 11), (1, 5, 9), (5, 11, 4), (11, 10, 2),
             (10, 7, 6), (7, 1, 8), (3, 9, 4), (3, 4, 2), (3, 2, 6), (3, 6, 8), (3, 8, 9), (4, 9, 5), (2, 4, 11),
             (6, 2, 10), (8, 6, 7), (9, 8, 1)]
    verts = [np.asarray(v, float) / np.linalg.norm(v) for v in verts]
    for _ in range(subdivisions):
        cache: dict[tuple[int, int], int] = {}

        def midpoint(a, b):
            key = (min(a, b), max(a, b))
            if key not in cache:
                m = verts[a] + verts[b]
                verts.append(m / np.linalg.norm(m))
                cache[key] = len(verts) - 1
            return cache[key]
        new = []
        for a, b, c in faces:
            ab, bc, ca = midpoint(a, b), midpoint(b, c), midpoint(c, a)
            new += [(a, ab, ca), (b, bc, ab), (c, ca, bc), (ab, bc, ca)]
        faces = new
    return np.asarray(verts), np.asarray(faces)


def cotangent_laplacian(verts: np.ndarray, faces: np.ndarray) -> tuple[sp.csr_matrix, sp.csr_matrix]:
    """(L, M): the cotangent stiffness matrix (positive semi-definite) and the lumped mass matrix."""
    n = len(verts)
    rows, cols, vals = [], [], []
    area = np.zeros(n)
    for k in range(3):
        i, j, o = faces[:, k], faces[:, (k + 1) % 3], faces[:, (k + 2) % 3]
        e1, e2 = verts[i] - verts[o], verts[j] - verts[o]
        cot = (e1 * e2).sum(1) / np.linalg.norm(np.cross(e1, e2), axis=1)
        rows += [i, j, i, j]
        cols += [j, i, i, j]
        vals += [-cot / 2, -cot / 2, cot / 2, cot / 2]
    tri_area = 0.5 * np.linalg.norm(np.cross(verts[faces[:, 1]] - verts[faces[:, 0]], verts[faces[:, 2]] - verts[faces[:, 0]]), axis=1)
    for k in range(3):
        np.add.at(area, faces[:, k], tri_area / 3)
    L = sp.coo_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(n, n)).tocsr()
    return L, sp.diags(area).tocsr()


class SpectralMesh:
    """A triangle mesh with the biharmonic premetric. Points are 3-D positions on the surface."""

    def __init__(self, verts: np.ndarray, faces: np.ndarray, k: int = 30):
        self.verts, self.faces = verts, faces
        L, M = cotangent_laplacian(verts, faces)
        # smallest eigenpairs by shift-invert, with a fixed start vector (reproducible)
        extra = min(k + 16, len(verts) - 2)
        vals, vecs = eigsh(L, k=extra, M=M, sigma=-1e-6, which="LM", v0=np.ones(len(verts)))
        order = np.argsort(vals)[1:]                                    # drop the constant mode
        vals, vecs = vals[order], vecs[:, order]
        # never cut through a (near-)degenerate eigenspace: the basis inside one is arbitrary,
        # and only whole eigenspaces make the distance independent of it
        while k < len(vals) and vals[k] - vals[k - 1] < 1e-3 * vals[k - 1]:
            k += 1
        self.eigvals, self.eigvecs = vals[:k], vecs[:, :k]
        a, b, c = (verts[faces[:, i]] for i in range(3))
        self.normals = np.cross(b - a, c - a)
        self.normals /= np.linalg.norm(self.normals, axis=1, keepdims=True)
        # per-face constant gradients of the three hat functions (F, 3 corners, 3 coords)
        twice_area = np.linalg.norm(np.cross(b - a, c - a), axis=1)[:, None]
        self.hat_grads = np.stack([np.cross(self.normals, c - b), np.cross(self.normals, a - c),
                                   np.cross(self.normals, b - a)], axis=1) / twice_area[:, None]

    def locate(self, x: np.ndarray) -> tuple[int, np.ndarray, np.ndarray]:
        """Closest point on the mesh to x: (face, barycentric coordinates, the point)."""
        best = (np.inf, 0, None, None)
        a, b, c = (self.verts[self.faces[:, i]] for i in range(3))
        for f in np.argsort(np.linalg.norm((a + b + c) / 3 - x, axis=1))[:12]:   # nearest faces suffice
            p, bary = closest_point_on_triangle(x, a[f], b[f], c[f])
            dist = np.linalg.norm(p - x)
            if dist < best[0]:
                best = (dist, f, bary, p)
        return best[1], best[2], best[3]

    def embedding(self, face: int, bary: np.ndarray) -> np.ndarray:
        """φ(x) / λ: the spectral coordinates whose Euclidean distance is the premetric."""
        return bary @ self.eigvecs[self.faces[face]] / self.eigvals

    def dist(self, x: np.ndarray, y: np.ndarray) -> float:
        fx, bx, _ = self.locate(x)
        fy, by, _ = self.locate(y)
        return float(np.linalg.norm(self.embedding(fx, bx) - self.embedding(fy, by)))

    def field(self, x: np.ndarray, y: np.ndarray, t: float) -> np.ndarray:
        """u_t(x | y) = (d log κ/dt) d ∇d / ‖∇d‖², κ = 1 − t, ∇d taken within x's face."""
        face, bary, _ = self.locate(x)
        diff = self.embedding(face, bary) - self.embedding(*self.locate(y)[:2])
        d = np.linalg.norm(diff)
        # ∇_x d = Σ_i diff_i / d · ∇(φ_i/λ_i), with ∇φ_i the face-constant gradient of the hat basis
        grad_emb = self.hat_grads[face].T @ (self.eigvecs[self.faces[face]] / self.eigvals)   # (3 coords, k)
        grad = grad_emb @ diff / max(d, 1e-12)
        return -1.0 / (1.0 - t) * d * grad / max(grad @ grad, 1e-12)

    def path(self, x0: np.ndarray, x1: np.ndarray, steps: int = 200) -> list[np.ndarray]:
        """x_t for t = k / steps by projected Euler steps of the conditional field."""
        xs, x = [x0], x0
        for k in range(steps - 1):
            x = self.locate(x + self.field(x, x1, k / steps) / steps)[2]
            xs.append(x)
        return xs


def closest_point_on_triangle(p, a, b, c) -> tuple[np.ndarray, np.ndarray]:
    """Closest point to p on triangle abc and its barycentric coordinates (Ericson, RTCD 5.1.5)."""
    ab, ac, ap = b - a, c - a, p - a
    d1, d2 = ab @ ap, ac @ ap
    if d1 <= 0 and d2 <= 0:
        return a, np.array([1.0, 0, 0])
    bp = p - b
    d3, d4 = ab @ bp, ac @ bp
    if d3 >= 0 and d4 <= d3:
        return b, np.array([0, 1.0, 0])
    vc = d1 * d4 - d3 * d2
    if vc <= 0 and d1 >= 0 and d3 <= 0:
        v = d1 / (d1 - d3)
        return a + v * ab, np.array([1 - v, v, 0])
    cp = p - c
    d5, d6 = ab @ cp, ac @ cp
    if d6 >= 0 and d5 <= d6:
        return c, np.array([0, 0, 1.0])
    vb = d5 * d2 - d1 * d6
    if vb <= 0 and d2 >= 0 and d6 <= 0:
        w = d2 / (d2 - d6)
        return a + w * ac, np.array([1 - w, 0, w])
    va = d3 * d6 - d5 * d4
    if va <= 0 and d4 - d3 >= 0 and d5 - d6 >= 0:
        w = (d4 - d3) / ((d4 - d3) + (d5 - d6))
        return b + w * (c - b), np.array([0, 1 - w, w])
    denom = 1.0 / (va + vb + vc)
    v, w = vb * denom, vc * denom
    return a + ab * v + ac * w, np.array([1 - v - w, v, w])
