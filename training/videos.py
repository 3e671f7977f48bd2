"""Where benchmark videos live: an extracted folder tree or the published zip archives.

VSI-Bench ships its videos as `arkitscenes.zip`, `scannet.zip` and `scannetpp.zip`, each
holding `<dataset>/<scene_name>.mp4`; unpacked, the same paths lie under the download
folder. UrbanVideo-Bench ships `videos/<video_id>`. A `VideoRoot` answers "where is
`scannet/scene0011_00.mp4`?" for one dataset, looking first for the file in the folder
and then for the member in every zip archive of the folder (also when the archive wraps
the paths in one more top-level folder). As a last resort a bare file name is matched
against every video of the root, when exactly one has that name.

The answer is a `VideoRef` (a file, or a zip archive plus a member name) that records
store as JSON. OpenCV can only decode from a file name, so `VideoMaterialiser` extracts
a zip member on demand into a cache folder, atomically, and removes it again after use
(unless asked to keep it): a 3 GB archive never has to be unpacked as a whole.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import zipfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from embodied_r_training.errors import VideoSourceError

VIDEO_SUFFIXES = (".mp4", ".mov", ".avi", ".mkv", ".webm")


def is_video_name(name: str) -> bool:
    """True for names ending in a common video suffix (case-insensitive)."""
    return name.lower().endswith(VIDEO_SUFFIXES)


@dataclass(frozen=True)
class VideoRef:
    """A video file (`member` None) or a member of the zip archive `file`."""

    file: str
    member: str | None = None

    def to_json(self) -> dict[str, str]:
        return {"file": self.file} if self.member is None else {"file": self.file, "member": self.member}

    @classmethod
    def from_json(cls, value: Any) -> VideoRef:
        """From `to_json` output or a plain path string."""
        if isinstance(value, str):
            return cls(value)
        if isinstance(value, Mapping) and isinstance(value.get("file"), str):
            member = value.get("member")
            return cls(value["file"], str(member) if member else None)
        raise VideoSourceError(
            f"a record's 'video' field must be a path or {{'file': ..., 'member': ...}}, got {value!r}; "
            "re-run `embodied-r-train prepare` to rewrite the records"
        )

    def describe(self) -> str:
        return self.file if self.member is None else f"{self.file} (member {self.member})"


def _clean_member(name: str) -> str:
    """A member or relative path in one spelling: forward slashes, no leading "./" or "/"."""
    text = name.replace("\\", "/")
    while text.startswith("./") or text.startswith("/"):
        text = text[2:] if text.startswith("./") else text[1:]
    return text


class VideoRoot:
    """Videos of one dataset: files under a folder and members of the zips in it.

    `path` may be a folder or a single zip archive. `label` names the root in messages
    ("VSI-Bench", "UrbanVideo-Bench", ...) and `flag` the command-line option that sets
    it, so an error says how to fix it.
    """

    def __init__(self, path: str | Path, *, label: str = "video", flag: str = "") -> None:
        root = Path(path).expanduser().resolve()
        how = f" (set it with {flag})" if flag else ""
        if not root.exists():
            raise VideoSourceError(f"{label} video root {root} does not exist{how}")
        self.path = root
        self.label = label
        self.flag = flag
        if root.is_file():
            if not zipfile.is_zipfile(root):
                raise VideoSourceError(
                    f"{label} video root {root} is a file but not a zip archive; give the folder that "
                    f"holds the videos or the dataset's .zip archives{how}"
                )
            self.folder: Path | None = None
            self.zips = [root]
        else:
            self.folder = root
            self.zips = sorted(p for p in root.glob("*.zip") if p.is_file())
        self._members: dict[str, tuple[Path, str]] | None = None
        self._by_name: dict[str, list[VideoRef]] | None = None

    # ------------------------------------------------------------------ indexes
    def _member_index(self) -> dict[str, tuple[Path, str]]:
        if self._members is None:
            index: dict[str, tuple[Path, str]] = {}
            for archive in self.zips:
                try:
                    with zipfile.ZipFile(archive) as zf:
                        names = [n for n in zf.namelist() if not n.endswith("/")]
                except (OSError, zipfile.BadZipFile) as exc:
                    raise VideoSourceError(
                        f"{archive} cannot be read as a zip archive ({exc}); download it again"
                    ) from exc
                for name in names:
                    if "__MACOSX" in name or not is_video_name(name):
                        continue
                    clean = _clean_member(name)
                    index.setdefault(clean, (archive, name))
            self._members = index
        return self._members

    def _name_index(self) -> dict[str, list[VideoRef]]:
        if self._by_name is None:
            index: dict[str, list[VideoRef]] = {}
            if self.folder is not None:
                for file in self.folder.rglob("*"):
                    if file.is_file() and is_video_name(file.name):
                        index.setdefault(file.name, []).append(VideoRef(str(file)))
            for clean, (archive, name) in self._member_index().items():
                index.setdefault(PurePosixPath(clean).name, []).append(VideoRef(str(archive), name))
            self._by_name = index
        return self._by_name

    def count(self) -> int:
        """Number of distinct video files and zip members under the root."""
        return sum(len(v) for v in self._name_index().values())

    # ------------------------------------------------------------------ lookup
    def find(self, *candidates: str | None) -> VideoRef | None:
        """The first candidate relative path found as a file or zip member; failing
        that, the only video of the root whose file name equals a candidate's."""
        wanted = [_clean_member(str(c)) for c in candidates if c]
        for rel in wanted:
            if self.folder is not None and (self.folder / rel).is_file():
                return VideoRef(str(self.folder / rel))
            members = self._member_index()
            if rel in members:
                archive, name = members[rel]
                return VideoRef(str(archive), name)
            suffix = "/" + rel
            hits = [v for k, v in members.items() if k.endswith(suffix)]
            if len(hits) == 1:
                return VideoRef(str(hits[0][0]), hits[0][1])
        for rel in wanted:
            named = self._name_index().get(PurePosixPath(rel).name, [])
            if len(named) == 1:
                return named[0]
        return None


class VideoMaterialiser:
    """A local file for each `VideoRef`: plain files as they are, zip members extracted
    into `cache_dir` when first needed (through a temporary file and a rename, so a kill
    never leaves a half-written video under the final name)."""

    def __init__(self, cache_dir: str | Path, *, keep: bool = False) -> None:
        self.cache_dir = Path(cache_dir)
        self.keep = keep
        self.extracted = 0

    def _target(self, ref: VideoRef) -> Path:
        return self.cache_dir / Path(ref.file).stem / _clean_member(ref.member or "")

    def exists(self, ref: VideoRef) -> bool:
        """True when the video can be opened (the file, or the archive and its member)."""
        if ref.member is None:
            return Path(ref.file).is_file()
        try:
            with zipfile.ZipFile(ref.file) as zf:
                zf.getinfo(ref.member)
            return True
        except (OSError, KeyError, zipfile.BadZipFile):
            return False

    @contextmanager
    def local_file(self, ref: VideoRef) -> Iterator[Path]:
        """Yield a path OpenCV can open; an extracted member is deleted afterwards
        unless `keep` was set."""
        if ref.member is None:
            path = Path(ref.file)
            if not path.is_file():
                raise VideoSourceError(f"video {path} does not exist")
            yield path
            return
        target = self._target(ref)
        fresh = False
        if not target.is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            try:
                with zipfile.ZipFile(ref.file) as zf, zf.open(ref.member) as src:
                    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".extract.", suffix=target.suffix)
                    try:
                        with os.fdopen(fd, "wb") as dst:
                            shutil.copyfileobj(src, dst, length=1 << 20)
                        os.replace(tmp, target)
                    except BaseException:
                        Path(tmp).unlink(missing_ok=True)
                        raise
            except (OSError, KeyError, zipfile.BadZipFile) as exc:
                raise VideoSourceError(
                    f"cannot extract {ref.member} from {ref.file} ({exc}); check the archive or "
                    "unpack it and point the video root at the unpacked folder"
                ) from exc
            fresh = True
            self.extracted += 1
        try:
            yield target
        finally:
            if fresh and not self.keep:
                target.unlink(missing_ok=True)
