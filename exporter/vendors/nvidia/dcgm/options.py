"""What the dcgm sources are given: --dcgm.url already read into its parts, and each source's settings."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from exporter.sources.upstream import Endpoint
from exporter.vendors.nvidia.dcgm import DEFAULT_MAX_BODY_BYTES

DcgmEndpoint = Endpoint  # --dcgm.url in the parts a fetch needs


@dataclass(frozen=True)
class DcgmOptions:
    """The dcgm-exporter reader's settings, as its collector builds them once from the parsed --dcgm.* flags."""

    endpoint: Optional[DcgmEndpoint]  # --dcgm.url's parts; None where nothing is fetched (a textfile, `mapping`, `demo`)
    file: Optional[str]  # --dcgm.file: read instead of fetching
    timeout_seconds: float  # --dcgm.timeout, positive
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES  # --dcgm.max-body-size, positive


@dataclass(frozen=True)
class DcgmHttpOptions:
    """HttpSource's settings: where to ask, how long one whole fetch may take, the largest answer taken."""

    endpoint: DcgmEndpoint
    timeout_seconds: float  # --dcgm.timeout, positive
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES  # --dcgm.max-body-size, positive


@dataclass(frozen=True)
class DcgmFileOptions:
    """FileSource's settings: the legacy textfile, how long one read may take, the largest file taken."""

    path: str  # --dcgm.file
    timeout_seconds: float = 5.0  # --dcgm.timeout, at least file_source.SETTLE_SECONDS
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES  # --dcgm.max-body-size, positive
