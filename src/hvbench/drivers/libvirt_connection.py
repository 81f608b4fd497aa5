"""libvirt's connection, as both halves of the libvirt driver use it (its QEMU domains,
``drivers.libvirt``, and its Xen ones, ``drivers.libvirt_xen``): the binding, what a URI names,
a domain's state, a connection's end, libvirt's version, domain XML's elements."""

from __future__ import annotations

import contextlib
import xml.etree.ElementTree as ET
from typing import Any
from urllib.parse import urlsplit

from hvbench.errors import HvbenchError

BINDING_FIX = "./setup.sh --with-libvirt (libvirtd, and the libvirt-python binding it builds)"


def binding() -> Any:
    """The libvirt Python binding, imported only when a libvirt platform is used; libvirt's own
    printing of errors to stderr is switched off (they are raised, and reported once)."""
    try:
        import libvirt
    except ImportError:
        raise HvbenchError(f"libvirt: the Python binding is missing: {BINDING_FIX}") from None
    libvirt.registerErrorHandler(lambda _ctx, _err: None, None)
    return libvirt


def is_active(domain: Any) -> bool:
    """Whether a virDomain still runs; False once it, or its connection, is gone."""
    try:
        return bool(domain is not None and domain.isActive())
    except Exception:  # libvirtError
        return False


def is_remote(uri: str) -> bool:
    """A URI naming a host (``qemu+ssh://host/system``) rather than this one."""
    return bool(urlsplit(uri).hostname)


def scheme(uri: object) -> str:
    """The hypervisor a libvirt URI names (``xen+ssh://`` -> ``xen``)."""
    return urlsplit(uri).scheme.split("+")[0] if isinstance(uri, str) else ""


def xml_child(parent: ET.Element, tag: str, text: str | None = None, **attrs: str) -> ET.Element:
    """A child element of domain XML, built as elements (never pasted strings)."""
    element = ET.SubElement(parent, tag, attrs)
    if text is not None:
        element.text = text
    return element


def close_connection(conn: Any) -> None:
    """Close a libvirt connection, which libvirtd may have closed first."""
    with contextlib.suppress(Exception):  # libvirtError: libvirtd went first
        conn.close()


def dotted(version: int) -> str:
    return f"{version // 1000000}.{version // 1000 % 1000}.{version % 1000}"
