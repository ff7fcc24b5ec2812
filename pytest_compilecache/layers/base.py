"""A cache layer, as every part of the check sees it: its name and column labels, which
files under a check's cache root it owns, what the phase child records for it, the rule
that judges its cold and warm records, and what the files a warm process wrote for it
mean. Pure: no torch, no pytest."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Set, Tuple, Type

from pytest_compilecache.model import LayerVerdict
from pytest_compilecache.wire import CacheRecord, LayerConfig
from pytest_compilecache.wirejson import Wire

# where each of TorchConfigs' config modules is imported from
CONFIG_MODULES = {"inductor": "torch._inductor.config", "functorch": "torch._functorch.config",
                  "dynamo": "torch._dynamo.config", "compiler": "torch.compiler.config"}

# where a switch got its value (child/settings.py tells)
SET_IN_PHASE, SET_IN_CODE, SET_BY_ENV, DEFAULT = "phase", "code", "environment", "default"
_WHERE = {SET_IN_PHASE: "set in the test's code during the phase",
          SET_IN_CODE: "set in code before the workload (a conftest, a fixture or a module "
                       "the test imports)"}


@dataclass(frozen=True)
class Switch:
    """A torch config flag that turns a layer's cache on (True) or off, and the
    environment variable torch reads it from. A layer names its switches, so that the
    phase child can tell where each got its value: the user's code or the environment."""
    config: str  # TorchConfigs' attribute: inductor, functorch or dynamo
    name: str
    env: Optional[str] = None

    @property
    def setting(self) -> str:
        return f"{CONFIG_MODULES[self.config]}.{self.name}"


@dataclass(frozen=True)
class Carrier:
    """What a warm process started from instead of the cold one's directories (a path of
    --compile-cache-via): a layer names it as what did not carry the files the warm
    process rebuilt."""
    name: str      # "the mega-cache"
    why: str = ""  # what torch is known to leave out of it, with the issues that say so


@dataclass
class LayerInputs:
    """What a layer's rule reads: both phases' cache records, the warm phase's config
    of this layer, the files the cold phase wrote for it, the keys it saved; and, for
    what the warm phase wrote (`warm_wrote`), the warm process's Triton cache and what
    it started from instead of the cold one's directories."""
    cold: CacheRecord
    warm: CacheRecord
    config: Optional[LayerConfig] = None
    cold_files: List[str] = field(default_factory=list)
    saved: Set[str] = field(default_factory=set)
    precompiled: bool = False  # the warm process loaded Dynamo's precompiled frames
    triton_dir: Optional[Path] = None
    carrier: Optional[Carrier] = None


@dataclass
class TorchConfigs:
    """What a layer's `config` reads in the phase child: torch's version and its config
    modules (None where this version has none), built by child/probe.py."""
    version: str
    inductor: Any
    functorch: Any
    dynamo: Any
    job_id: Optional[str]
    force_disabled: bool  # TORCHINDUCTOR_FORCE_DISABLE_CACHES and the like
    # force_disable_caches on while the workload compiled, off at its end (the setting)
    forced_while_compiling: Optional[str] = None
    # a switch's setting -> where its value came from (SET_IN_PHASE, ...; child/settings.py)
    origins: Dict[str, str] = field(default_factory=dict)

    @staticmethod
    def on() -> Dict[str, Any]:
        """A layer's config record where its config enables it."""
        return {"enabled": True, "why": None}

    def forced(self) -> Optional[Dict[str, Any]]:
        """Every layer's config record where caches are force-disabled, else None."""
        if self.forced_while_compiling and not self.force_disabled:
            setting = f"{self.forced_while_compiling} = True"
            return {"enabled": False, "off": True, "in_code": True, "setting": setting,
                    "why": f"{setting} while the workload compiled, set by the test's code "
                           f"around the compile (a config.patch?): torch neither read nor "
                           f"wrote any cache, so a service with that setting never starts "
                           f"warm; remove it"}
        if not self.force_disabled:
            return None
        return {"enabled": False, "off": True,
                "why": "caches force-disabled (TORCHINDUCTOR_FORCE_DISABLE_CACHES / "
                       "TORCH_COMPILE_FORCE_DISABLE_CACHES)"}

    def off(self, switch: Switch) -> Optional[str]:
        """`torch._inductor.config.fx_graph_cache = False` where `switch` is off, else None."""
        module = getattr(self, switch.config, None)
        value = getattr(module, switch.name, None) if module is not None else None
        return None if value is None or value else f"{switch.setting} = {value!r}"

    def where(self, switch: Switch) -> str:
        """Where an off switch was set: the test's code, the environment, torch's default."""
        origin = self.origins.get(switch.setting, DEFAULT)
        if origin in _WHERE:
            return _WHERE[origin]
        if origin == SET_BY_ENV and switch.env:
            return f"from the environment variable {switch.env}"
        return f"torch {self.version}'s default"

    def switched_off(self, switch: Switch, consequence: str) -> Optional[Dict[str, Any]]:
        """The config record of a layer whose own switch is off, or None: `off`, naming
        the setting and where it was set. Set by the test's code, the check fails with
        the fix: such code in a service turns the cache off in production too, where
        nobody looks (an environment variable is this run's choice; torch's default,
        torch's)."""
        setting = self.off(switch)
        if setting is None:
            return None
        origin = self.origins.get(switch.setting, DEFAULT)
        in_code = origin in _WHERE
        why = f"{setting}, {self.where(switch)}"
        if in_code:
            why += (f": a service with that setting never starts warm ({consequence}); "
                    f"remove it, or set it True")
        elif origin == SET_BY_ENV:
            why += f" ({consequence}; unset it for a warm start)"
        return {"enabled": False, "off": True, "in_code": in_code, "setting": setting,
                "why": why}


class CacheLayer:
    """One layer. `heads`: the directories under TORCHINDUCTOR_CACHE_DIR it owns;
    `tops`: the cache root's own directories it owns; `suffixes`: files it owns by
    name anywhere else in Inductor's dir (after every directory claim)."""
    name = ""
    short = ""       # the terminal table's column
    short_md = ""    # the job summary's column
    keyed = False    # its entries have cache keys (the key manifest, drift)
    observed = ""    # what the phase child records for it (child/probe.py)
    heads: Tuple[str, ...] = ()
    tops: Tuple[str, ...] = ()
    suffixes: Tuple[str, ...] = ()
    switches: Tuple[Switch, ...] = ()  # the config flags `config` reads (child/settings.py)
    # What the phase child runs to observe this layer beyond the trace every layer shares
    # (child/probe.py): "module:Class", imported in the phase child only, with
    # start(), stop() and record(trace) -> JSON. Its record is the cache record's
    # `section` entry, read back typed by `record_type` (`section_of`).
    observer = ""
    section = ""
    record_type: Optional[Type[Wire]] = None

    @property
    def section_key(self) -> str:
        """Where its observer's record goes in the cache record: `section`, else its name."""
        return self.section or self.name

    def section_of(self, rec: CacheRecord) -> Any:
        """This layer's own section of a phase's cache record, typed by `record_type`
        (None where the phase wrote none: an older record, a failed phase)."""
        raw = rec.sections.get(self.section_key)
        if self.record_type is None:
            return raw
        return self.record_type.optional(raw)

    def owns_top(self, parts: List[str]) -> bool:
        return parts[0] in self.tops

    def config(self, torch: TorchConfigs) -> Optional[Dict[str, Any]]:
        """In the phase child: whether this torch and its config enable the layer, and
        why not; None for a layer with no switch of its own."""
        return None

    def judge(self, inputs: LayerInputs) -> Tuple[LayerVerdict, List[str]]:
        """The layer's verdict, and notes for the check."""
        raise NotImplementedError

    def graph_rows(self, inputs: LayerInputs) -> List[Dict[str, Any]]:
        """The report's rows for this layer's lookups (a keyed layer's); none by default."""
        return []

    def warm_wrote(self, lv: LayerVerdict, paths: List[str], inputs: LayerInputs) -> None:
        """The warm run wrote `paths` (files this layer owns) into the cache root: a
        layer that did, missed."""
        lv.files = paths
        lv.warm = f"{len(paths)} new file(s)"
        if lv.state in ("hit", "n/a"):
            lv.state = "miss"
            lv.reasons.append(f"the warm run wrote {len(paths)} new file(s) for this layer")

    def load_compiles(self, warm: CacheRecord) -> List[str]:
        """What of this layer a warm process that loaded a compiled artifact (aot, aoti)
        still compiled, each as "N what(s)": it must compile nothing."""
        return []

    def unpacked(self, warm: CacheRecord, paths: List[str]) -> Tuple[List[str], Optional[str]]:
        """A warm process that started from a carried artifact wrote `paths` for this
        layer: those the artifact's load wrote out, which are no rebuild, and a note that
        says so; none by default."""
        return [], None

    def rebuilt(self, lv: LayerVerdict, paths: List[str], carrier: Carrier) -> bool:
        """A warm process that loaded a compiled artifact wrote `paths` for this layer:
        True where that is a rebuild `carrier` did not carry (`lv` then says so), False
        where they are only files it wrote."""
        return False

    def problems(self, lv: LayerVerdict, config: Optional[LayerConfig]) -> List[str]:
        """What of the layer's verdict fails the check: a miss, a bypass, or the layer
        switched off by the test's own code (a service running that code never starts
        warm from it)."""
        if lv.state in ("miss", "bypass") or (lv.state == "off" and config is not None
                                              and config.in_code):
            return [f"{self.name}: {lv.state}" + (f" - {lv.reasons[0]}" if lv.reasons else "")]
        return []
