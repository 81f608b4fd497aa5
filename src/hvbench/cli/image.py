"""``hvbench image list|show|build|prune``: the guest images in the cache, each command loading
the guest's modules when it runs (``hvbench.cli``'s rule)."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.table import Table

from hvbench.cli.lines import console
from hvbench.guest.kernel import FLAVOURS

app = typer.Typer(no_args_is_help=True, help="Guest images built from Debian packages.")
out = console()


def _mib(size: int) -> str:
    return f"{size / (1 << 20):.1f} MiB"


@app.command("list")
def list_images(as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """Images in the cache, newest first."""
    from hvbench.guest import image as guest_image

    if as_json:
        listed = [
            {"key": i.key, "dir": str(i.dir), "size": i.size, "manifest": i.manifest}
            for i in guest_image.images()
        ]
        print(json.dumps(listed, indent=1))
        return
    table = Table("key", "form", "tools", "built", "size")
    for img in guest_image.images():
        m = img.manifest
        if "kernel" in m:
            form = f"initramfs, {m['kernel']['package']} {m['kernel']['version']}"
        else:
            form = f"{m.get('form', 'rootfs')}, Debian {m.get('suite', '?')}"
        table.add_row(img.key, form, " ".join(m["tools"]) or "-", m["built"], _mib(img.size))
    out.print(table)
    out.print(f"cache: {guest_image.cache_root()}")


@app.command()
def show(
    key: Annotated[str, typer.Argument(help="the image's key or its first characters")],
    files: Annotated[bool, typer.Option(help="list every file with its sha256")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="print the whole manifest")] = False,
) -> None:
    """An image's manifest: kernel, packages and versions, files."""
    from hvbench.guest import image as guest_image

    img = guest_image.find(key)
    m = img.manifest
    if as_json:
        print(json.dumps(m, indent=1))
        return
    if "kernel" in m:
        out.print(f"image {m['key']} (format {m['format']}, built {m['built']}) in {img.dir}")
        k = m["kernel"]
        form = "vmlinux (ELF, PVH entry)" if img.vmlinux else "bzImage"
        out.print(f"kernel: {k['package']} {k['version']} ({k['release']}), boots as {form}")
    else:
        out.print(f"image {m['key']} ({m.get('form')}, Debian {m.get('suite')}) in {img.dir}")
    out.print(f"tools: {' '.join(m['tools']) or '-'}")
    table = Table("package", "version")
    for name, version in m["packages"].items():
        table.add_row(name, version)
    out.print(table)
    if files:
        listing = Table("path", "size", "sha256", "package")
        for path, f in m["files"].items():
            listing.add_row(path, str(f["size"]), f["sha256"], f.get("package") or "")
        out.print(listing)
    else:
        out.print(f"{len(m['files'])} files (--files lists them with their sha256)")


@app.command()
def build(
    tools: Annotated[
        list[str] | None, typer.Argument(help="programs the guest needs (e.g. fio iperf3)")
    ] = None,
    kernel: Annotated[str, typer.Option(help=f"kernel flavour: {', '.join(FLAVOURS)}")] = "amd64",
    force: Annotated[bool, typer.Option(help="rebuild even if cached")] = False,
) -> None:
    """Build (or find in the cache) the image for these tools; prints its key."""
    from hvbench.guest import image as guest_image

    img = guest_image.build(tools or [], kernel, force=force)
    out.print(f"{img.key} {img.dir} ({_mib(img.size)})")


@app.command()
def prune(
    keep: Annotated[int, typer.Option(min=0, help="how many of the newest images to keep")] = 0,
) -> None:
    """Remove cached images and what was derived from them (kernel packages stay cached)."""
    from hvbench.drivers import uml
    from hvbench.guest import image as guest_image

    removed = guest_image.prune(keep)
    roots = uml.prune_roots({i.key for i in guest_image.images()})
    out.print(f"removed {len(removed)} image(s): {' '.join(i.key for i in removed) or '-'}")
    if roots:
        out.print(f"removed {len(roots)} UML root filesystem(s) of images no longer cached")
