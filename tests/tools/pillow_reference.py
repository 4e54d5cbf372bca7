#!/usr/bin/python3
"""Pillow as the outside reference for kiln's decoder tests (tests/tools/pillow_decode_test.cc).

  pillow_reference.py make DIR      writes the field-case images (B38, B40 and 32-bit BMPs of
                                    every header generation) into DIR, with Pillow where Pillow
                                    can write them and byte by byte where it cannot
  pillow_reference.py decode FILE.. prints, per file, one line:
                                    NAME MODE WIDTH HEIGHT HEX
                                    for Pillow's first frame / page: MODE is "RGB" or "RGBA"
                                    (what Pillow decodes it to: P with transparency and LA become
                                    RGBA, other modes RGB) and HEX its pixels, row-major, or
                                    NAME ERROR MESSAGE when Pillow cannot read it

Needs python3-pil (Debian), which scripts/setup.sh installs.
"""
import os
import struct
import sys

from PIL import Image

RED = (255, 0, 0)
BLUE = (0, 0, 255)


def bmp32(header_bytes, compression, masks, pixels, width=2, height=1):
    """A 32-bit BMP: DIB header of `header_bytes`, `compression` (0 BI_RGB, 3 BI_BITFIELDS, 6
    BI_ALPHABITFIELDS), `masks` (R, G, B[, A]) inside a V2+ header or after a 40-byte one, and
    `pixels` as (B, G, R, X) tuples for each row (bottom-up)."""
    row = b"".join(bytes(p) for p in pixels)
    data = row * height
    info = struct.pack("<IiiHHIIiiII", header_bytes, width, height, 1, 32, compression,
                       len(data), 2835, 2835, 0, 0)
    after = b""
    packed_masks = b"".join(struct.pack("<I", m) for m in masks)
    if header_bytes == 40:
        after = packed_masks
    else:
        info += packed_masks
        info += b"\0" * (header_bytes - len(info))
    offset = 14 + len(info) + len(after)
    return b"BM" + struct.pack("<IHHI", offset + len(data), 0, 0, offset) + info + after + data


# Red opaque-looking pixel with padding 0, green with padding / alpha 128.
BMP_PIXELS = [(0, 0, 255, 0), (0, 255, 0, 128)]
RGB_MASKS = (0xFF0000, 0x00FF00, 0x0000FF)
RGBA_MASKS = RGB_MASKS + (0xFF000000,)
BMPS = {
    "bmp_v1_rgb.bmp": (40, 0, ()),
    "bmp_v1_bitfields.bmp": (40, 3, RGB_MASKS),
    "bmp_v2_bitfields.bmp": (52, 3, RGB_MASKS),
    "bmp_v3_no_alpha.bmp": (56, 3, RGB_MASKS + (0,)),
    "bmp_v3_alpha.bmp": (56, 3, RGBA_MASKS),
    "bmp_v4_no_alpha.bmp": (108, 3, RGB_MASKS + (0,)),
    "bmp_v4_alpha.bmp": (108, 3, RGBA_MASKS),
    "bmp_v5_no_alpha.bmp": (124, 3, RGB_MASKS + (0,)),
    "bmp_v5_alpha.bmp": (124, 3, RGBA_MASKS),
    "bmp_v5_rgb_with_alpha_mask.bmp": (124, 0, RGBA_MASKS),
}


def make(out):
    os.makedirs(out, exist_ok=True)
    red = Image.new("RGB", (8, 8), RED)
    blue = Image.new("RGB", (8, 8), BLUE)
    # B38: GIF, animated GIF, animated lossless WebP, two-page TIFF, APNG.
    red.save(os.path.join(out, "single.gif"))
    red.save(os.path.join(out, "anim.gif"), save_all=True, append_images=[blue], duration=100,
             loop=0)
    red.save(os.path.join(out, "anim.webp"), save_all=True, append_images=[blue], lossless=True,
             duration=100)
    Image.new("RGB", (8, 8), RED).save(os.path.join(out, "pages.tiff"), save_all=True,
                                       append_images=[Image.new("RGB", (16, 4), BLUE)])
    red.save(os.path.join(out, "anim.png"), save_all=True, append_images=[blue], duration=100)
    # A GIF with a transparent left half (palette index 0) over red.
    p = Image.new("P", (8, 8), 1)
    p.putpalette([0, 255, 0] + list(RED) + [0, 0, 0] * 254)
    for y in range(8):
        for x in range(4):
            p.putpixel((x, y), 0)
    p.save(os.path.join(out, "transparent.gif"), transparency=0)
    # B40: 8x8 RGBA WebP, left half green with alpha 0, right half opaque red.
    rgba = Image.new("RGBA", (8, 8), (255, 0, 0, 255))
    for y in range(8):
        for x in range(4):
            rgba.putpixel((x, y), (0, 255, 0, 0))
    rgba.save(os.path.join(out, "b40_lossless.webp"), lossless=True, exact=True)
    rgba.save(os.path.join(out, "b40_lossy.webp"), quality=90, exact=True)
    for name, (header, compression, masks) in BMPS.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(bmp32(header, compression, masks, BMP_PIXELS))


def decode(paths):
    for path in paths:
        name = os.path.basename(path)
        try:
            im = Image.open(path)
            im.seek(0)
            has_alpha = im.mode in ("RGBA", "LA", "PA") or (
                im.mode == "P" and "transparency" in im.info)
            mode = "RGBA" if has_alpha else "RGB"
            im = im.convert(mode)
            print(name, mode, im.width, im.height, im.tobytes().hex())
        except Exception as e:  # noqa: BLE001 - the message is the answer
            print(name, "ERROR", str(e).replace("\n", " "))


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "make":
        make(sys.argv[2])
    elif len(sys.argv) >= 2 and sys.argv[1] == "decode":
        decode(sys.argv[2:])
    else:
        sys.exit(__doc__)
