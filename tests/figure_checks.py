"""Pure-Python checks of saved figures: font types inside a PDF, resolution recorded in a PNG.

No PDF library is needed: font dictionaries name their ``/Subtype`` (Type1, Type3, TrueType, Type0, CIDFontType2,
...), either in plain objects (matplotlib writes them so) or inside Flate-compressed object streams, which are
inflated here too. A PNG's resolution is its ``pHYs`` chunk (pixels per metre, unit 1).
"""

from __future__ import annotations

import re
import struct
import zlib
from pathlib import Path

FONT_SUBTYPES = {b"Type1", b"Type3", b"TrueType", b"Type0", b"CIDFontType0", b"CIDFontType2", b"MMType1"}
_STREAM = re.compile(rb"stream\r?\n(.*?)\r?\nendstream", re.S)
_SUBTYPE = re.compile(rb"/Subtype\s*/(\w+)")
PPM_300_DPI = round(300 / 0.0254)  # 11811 pixels per metre


def pdf_font_subtypes(path: Path) -> set[str]:
    """Every font ``/Subtype`` in the PDF, looking into compressed streams as well."""
    data = Path(path).read_bytes()
    chunks = [data]
    for m in _STREAM.finditer(data):
        try:
            chunks.append(zlib.decompress(m.group(1)))
        except zlib.error:
            continue
    found = set()
    for chunk in chunks:
        found |= {m.group(1) for m in _SUBTYPE.finditer(chunk) if m.group(1) in FONT_SUBTYPES}
    return {f.decode() for f in found}


def png_pixels_per_metre(path: Path) -> tuple[int, int] | None:
    """(x, y) pixels per metre from the pHYs chunk, or None when the PNG records no physical size."""
    data = Path(path).read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    pos = 8
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos : pos + 8])
        if kind == b"pHYs":
            x, y, unit = struct.unpack(">IIB", data[pos + 8 : pos + 17])
            return (x, y) if unit == 1 else None
        if kind == b"IDAT":  # pHYs must come before the image data
            return None
        pos += 12 + length
    return None


def assert_print_ready(paths: list[Path]) -> None:
    """Every PDF embeds TrueType (no Type 3) fonts, every PNG records at least 300 dpi."""
    pdfs = [p for p in paths if p.suffix == ".pdf"]
    pngs = [p for p in paths if p.suffix == ".png"]
    assert pdfs and pngs
    for pdf in pdfs:
        fonts = pdf_font_subtypes(pdf)
        assert fonts, f"{pdf.name}: no font found (the check would be blind)"
        assert "Type3" not in fonts, f"{pdf.name} embeds Type 3 fonts: {fonts}"
        assert fonts & {"TrueType", "CIDFontType2"}, f"{pdf.name}: {fonts}"
    for png in pngs:
        ppm = png_pixels_per_metre(png)
        assert ppm is not None and min(ppm) >= PPM_300_DPI, f"{png.name}: {ppm} px/m (< 300 dpi)"
