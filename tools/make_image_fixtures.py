#!/usr/bin/python3
"""Writes the tiny JPEG/PNG fixtures of tests/unit/test_image.c into
tests/data/images/ and seeds for fuzz/fuzz_image.c into fuzz/corpus/image/.

Needs Debian's python3-pil (run with /usr/bin/python3). PNG variants that
PIL cannot write (16-bit RGB, 2-bit gray, Adam7 interlacing) come from the
small raw PNG writer below. The pixel values are repeated as constants in
test_image.c: change both together.

usage: /usr/bin/python3 tools/make_image_fixtures.py
"""
import io
import os
import struct
import zlib

from PIL import Image

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
OUT = os.path.join(ROOT, "tests", "data", "images")
FUZZ = os.path.join(ROOT, "fuzz", "corpus", "image")

# 2x2 RGB: red, green / blue, (10, 20, 30)
RGB_2X2 = [(255, 0, 0), (0, 255, 0), (0, 0, 255), (10, 20, 30)]


def chunk(kind, data):
    body = kind + data
    return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body) & 0xFFFFFFFF)


def raw_png(width, height, bit_depth, color_type, rows, extra=b"", interlace=0):
    """rows: list of already-packed scanline bytes (without filter byte);
    for interlace=1 a list of (pass rows) lists, each packed."""
    ihdr = struct.pack(">IIBBBBB", width, height, bit_depth, color_type, 0, 0, interlace)
    if interlace:
        raw = b"".join(b"\x00" + r for pass_rows in rows for r in pass_rows)
    else:
        raw = b"".join(b"\x00" + r for r in rows)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + extra +
            chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


ADAM7 = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2),
         (0, 1, 1, 2)]


def adam7_rgb8(pixels, width, height):
    """Pass rows for an 8-bit RGB Adam7 image (pixels row-major tuples)."""
    passes = []
    for x0, y0, dx, dy in ADAM7:
        rows = []
        for y in range(y0, height, dy):
            xs = range(x0, width, dx)
            if len(xs) == 0:
                continue
            rows.append(bytes(c for x in xs for c in pixels[y * width + x]))
        passes.append(rows)
    return passes


def pil_bytes(img, fmt, **kw):
    buf = io.BytesIO()
    img.save(buf, fmt, **kw)
    return buf.getvalue()


def rgb_image(w, h, pixels):
    img = Image.new("RGB", (w, h))
    img.putdata(pixels)
    return img


def blocks_16x16(colors):
    """16x16 made of four solid 8x8 blocks (JPEG blocks: decodes near exact)."""
    px = []
    for y in range(16):
        for x in range(16):
            px.append(colors[(y // 8) * 2 + (x // 8)])
    return px


def noise(w, h, seed=7):
    state = seed
    out = []
    for _ in range(w * h):
        state = (state * 1103515245 + 12345) & 0x7FFFFFFF
        out.append(((state >> 8) & 255, (state >> 16) & 255, (state >> 4) & 255))
    return out


def fixtures():
    f = {}
    f["rgb_2x2.png"] = pil_bytes(rgb_image(2, 2, RGB_2X2), "PNG")
    # gray 3x2: 0, 100, 255 / 7, 128, 254
    gray = Image.new("L", (3, 2))
    gray.putdata([0, 100, 255, 7, 128, 254])
    f["gray_3x2.png"] = pil_bytes(gray, "PNG")
    # palette 2x2 with a tRNS chunk: index 0 fully transparent (dropped)
    pal = Image.new("P", (2, 2))
    pal.putpalette([255, 0, 0, 0, 255, 0, 0, 0, 255, 10, 20, 30])
    pal.putdata([0, 1, 2, 3])
    f["palette_2x2.png"] = pil_bytes(pal, "PNG", transparency=0, optimize=True)
    # RGBA 2x2: alpha 0, 64, 128, 255 must not change RGB
    rgba = Image.new("RGBA", (2, 2))
    rgba.putdata([p + (a,) for p, a in zip(RGB_2X2, (0, 64, 128, 255))])
    f["rgba_2x2.png"] = pil_bytes(rgba, "PNG")
    # gray + alpha 2x1: 50 (alpha 0), 200 (alpha 255)
    la = Image.new("LA", (2, 1))
    la.putdata([(50, 0), (200, 255)])
    f["gray_alpha_2x1.png"] = pil_bytes(la, "PNG")
    # 16-bit RGB 2x1: 0x1234 0xABCD 0xFF00 / 0x00FF 0x8080 0xFFFF -> high bytes
    rows16 = [struct.pack(">6H", 0x1234, 0xABCD, 0xFF00, 0x00FF, 0x8080, 0xFFFF)]
    f["rgb16_2x1.png"] = raw_png(2, 1, 16, 2, rows16)
    # 16-bit gray 2x1: 0x0102, 0xFEFF -> 1, 254
    f["gray16_2x1.png"] = raw_png(2, 1, 16, 0, [struct.pack(">2H", 0x0102, 0xFEFF)])
    # 2-bit gray 4x1: levels 0..3 -> 0, 85, 170, 255
    f["gray2_4x1.png"] = raw_png(4, 1, 2, 0, [bytes([0b00011011])])
    # Adam7-interlaced 8-bit RGB 3x3: pixel (x, y) = (10x, 10y, 50)
    px3 = [(10 * x, 10 * y, 50) for y in range(3) for x in range(3)]
    f["interlaced_3x3.png"] = raw_png(3, 3, 8, 2, adam7_rgb8(px3, 3, 3), interlace=1)
    # JPEGs: four solid blocks red, green / blue, gray(128); 4:4:4, q100
    colors = [(255, 0, 0), (0, 255, 0), (0, 0, 255), (128, 128, 128)]
    blocks = rgb_image(16, 16, blocks_16x16(colors))
    f["rgb_16x16.jpg"] = pil_bytes(blocks, "JPEG", quality=100, subsampling=0)
    f["progressive_16x16.jpg"] = pil_bytes(blocks, "JPEG", quality=100, subsampling=0,
                                           progressive=True)
    gray_blocks = Image.new("L", (16, 16))
    gray_blocks.putdata([(0, 60, 180, 255)[(y // 8) * 2 + x // 8] for y in range(16)
                         for x in range(16)])
    f["gray_16x16.jpg"] = pil_bytes(gray_blocks, "JPEG", quality=100)
    # CMYK (PIL writes Adobe, inverted): red, green / blue, black
    cmyk = Image.new("CMYK", (16, 16))
    cmyk.putdata(blocks_16x16([(0, 255, 255, 0), (255, 0, 255, 0), (255, 255, 0, 0),
                               (0, 0, 0, 255)]))
    f["cmyk_16x16.jpg"] = pil_bytes(cmyk, "JPEG", quality=100)
    # Truncated: a 24x24 noise image cut in its entropy-coded data / IDAT.
    nimg = rgb_image(24, 24, noise(24, 24))
    jpg = pil_bytes(nimg, "JPEG", quality=90)
    f["truncated.jpg"] = jpg[: len(jpg) * 2 // 3]
    png = pil_bytes(nimg, "PNG")
    f["truncated.png"] = png[: len(png) // 2]
    # IHDR with a bad CRC (critical chunk: an error in libpng and PIL).
    good = bytearray(f["rgb_2x2.png"])
    good[29] ^= 0xFF
    f["bad_crc.png"] = bytes(good)
    # Not an image format kerasc reads.
    f["tiny.gif"] = pil_bytes(rgb_image(1, 1, [(1, 2, 3)]), "GIF")
    return f


def main():
    os.makedirs(OUT, exist_ok=True)
    os.makedirs(FUZZ, exist_ok=True)
    for name, data in sorted(fixtures().items()):
        with open(os.path.join(OUT, name), "wb") as fh:
            fh.write(data)
        print(f"{name}: {len(data)} bytes")
    # Fuzz seeds: each decoder path once (valid and broken).
    for name in ["rgb_2x2.png", "palette_2x2.png", "gray_alpha_2x1.png", "rgb16_2x1.png",
                 "gray2_4x1.png", "interlaced_3x3.png", "rgb_16x16.jpg",
                 "progressive_16x16.jpg", "gray_16x16.jpg", "cmyk_16x16.jpg",
                 "truncated.jpg", "truncated.png"]:
        with open(os.path.join(OUT, name), "rb") as src, \
                open(os.path.join(FUZZ, name.replace(".", "_")), "wb") as dst:
            dst.write(src.read())


if __name__ == "__main__":
    main()
