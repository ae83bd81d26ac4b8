"""The package's shape: each layer a folder, imports only running down the floors, no
import circles, and the offline layers never load the network; one policy table, every
gate limit declared in gate/limits.py alone; and the tests' shape: each test file named
for the module it tests (or a listed scenario), none importing another."""

from __future__ import annotations

import ast
import json
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

PACKAGE = Path(__file__).parents[1] / "src" / "quantcheck"
DEVELOPMENT = PACKAGE.parents[1] / "docs" / "development.md"


@dataclass(frozen=True)
class LayerMap:
    """docs/development.md's layer map, the one place it is written: each room's floor
    (a module imports only from lower floors or its own folder; folders on one floor
    never import each other), and the rules its rows state."""

    floors: dict[str, int]
    offline: frozenset[str]  # "never imports the network"
    never_imports: dict[str, frozenset[str]]  # "never imports `wire/`"
    only_imported_by: dict[str, frozenset[str]]  # "only `cli/` imports it"


def read_layer_map(text: str) -> LayerMap:
    """The map from the table of the section that starts "The house" and ends at
    "Where a new line goes": rows `| FLOOR | `room/`, `module.py` | what lives there |`."""
    section = text.split("**The house", 1)[1].split("Where a new line goes", 1)[0]
    rows = re.findall(r"^\s*\| (\d+) \| ((?:`[\w.]+/?`(?:, )?)+) \| (.+) \|$", section,
                      re.MULTILINE)
    floors: dict[str, int] = {}
    offline: set[str] = set()
    never: dict[str, frozenset[str]] = {}
    only: dict[str, frozenset[str]] = {}
    for floor, cell, says in rows:
        for name in re.findall(r"`([\w.]+?)(?:/|\.py)`", cell):
            floors[name] = int(floor)
            if "never imports the network" in says.lower():
                offline.add(name)
            if found := re.findall(r"never imports `(\w+)/`", says, re.IGNORECASE):
                never[name] = frozenset(found)
            if found := re.findall(r"only `(\w+)/` imports it", says):
                only[name] = frozenset(found)
    return LayerMap(floors, frozenset(offline), never, only)


LAYERS = read_layer_map(DEVELOPMENT.read_text(encoding="utf-8"))
FLOORS = LAYERS.floors
TOP_LEVEL_MODULES = {"__init__", "__main__", "_version", "errors"}
LAYER_FOLDERS = {room for room in FLOORS if (PACKAGE / room).is_dir()}
NETWORK = ["aiohttp", "quantcheck.wire.client", "quantcheck.wire.dialects"]


def module_imports(package: Path = PACKAGE) -> dict[str, set[str]]:
    """Every package module and the package modules it imports (anywhere in its body)."""
    files = {}
    for path in package.rglob("*.py"):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        files[".".join(parts)] = path
    edges: dict[str, set[str]] = {name: set() for name in files}
    for name, path in files.items():
        here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = here[:len(here) - node.level + 1] if node.level else []
                module = ".".join(base + ([node.module] if node.module else []))
                targets = [f"{module}.{alias.name}" for alias in node.names] + (
                    [module] if node.module else [])
            for target in targets:
                while target and target not in files:
                    target = target.rpartition(".")[0]
                if target and target not in (name, "quantcheck"):
                    edges[name].add(target)
    return edges


def room(module: str) -> str:
    """The folder (or top-level module) a module lives in: quantcheck.triage.pairs -> triage."""
    return module.split(".")[1]


def upward_imports(edges: dict[str, set[str]], layers: LayerMap = LAYERS) -> list[str]:
    """Every import that does not run down the floors, or that a row of the map forbids
    ("never imports `wire/`", "only `cli/` imports it"), as 'importer -> imported'."""
    wrong = []
    for importer, imported in edges.items():
        if importer == "quantcheck":
            continue  # the public API re-exports from every layer
        for target in imported:
            here, there = room(importer), room(target)
            if here == there:
                continue
            down = layers.floors[there] < layers.floors[here]
            forbidden = there in layers.never_imports.get(here, ()) or (
                there in layers.only_imported_by and here not in layers.only_imported_by[there])
            if not down or forbidden:
                wrong.append(f"{importer} -> {target}")
    return sorted(wrong)


def test_each_layer_is_a_folder_and_the_top_level_holds_a_handful() -> None:
    top = {path.stem for path in PACKAGE.glob("*.py")}
    assert top == TOP_LEVEL_MODULES, f"modules that belong in a layer: {top - TOP_LEVEL_MODULES}"
    folders = {path.name for path in PACKAGE.iterdir()
               if path.is_dir() and (path / "__init__.py").exists()}
    assert folders == LAYER_FOLDERS
    holding_two = [f for f in folders if len(list((PACKAGE / f).glob("[!_]*.py"))) >= 2]
    assert len(holding_two) >= 5


@pytest.mark.parametrize("folder", sorted(LAYER_FOLDERS))
def test_each_folder_says_what_lives_there_and_points_to_the_map(folder: str) -> None:
    """What a folder may import is written once, in docs/development.md: its docstring
    points there rather than keeping a copy that can go stale."""
    docstring = ast.get_docstring(ast.parse((PACKAGE / folder / "__init__.py").read_text()))
    assert docstring
    said = " ".join(docstring.split())
    assert "the layer map in docs/development.md" in said
    assert not re.search(r"\bImports (only )?\w", said), said


PACKAGES_IN_FOLDERS = sorted(path.parent.relative_to(PACKAGE).as_posix()
                             for path in PACKAGE.glob("*/*/__init__.py"))


@pytest.mark.parametrize("package", PACKAGES_IN_FOLDERS)
def test_each_package_in_a_folder_says_in_one_line_what_it_holds(package: str) -> None:
    """A folder split by what it holds (store/inputs/, store/records/, ...): each package's
    docstring is its purpose in one line, and a module's name is unique in its layer, so
    tests/test_<layer>_<module>.py names one module."""
    docstring = ast.get_docstring(ast.parse((PACKAGE / package / "__init__.py").read_text()))
    assert docstring and "\n" not in docstring.strip(), docstring
    names = [path.stem for path in (PACKAGE / package.split("/")[0]).rglob("[!_]*.py")]
    assert sorted({name for name in names if names.count(name) > 1}) == []


def test_every_import_runs_down_the_floors() -> None:
    edges = module_imports()
    assert {room(module) for module in edges if module != "quantcheck"} <= set(FLOORS)
    assert upward_imports(edges) == []


def test_a_planted_upward_import_is_found(tmp_path: Path) -> None:
    copy = tmp_path / "quantcheck"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    files = copy / "store" / "files.py"
    files.write_text(files.read_text() + "\n\ndef late() -> None:\n"
                     "    from ..triage.pairs import compare  # noqa: F401\n")
    lab_user = copy / "fetch" / "collect.py"
    lab_user.write_text(lab_user.read_text() + "\nfrom ..lab.endpoint import LabServer\n")
    wire_user = copy / "pipeline" / "ab.py"
    wire_user.write_text(wire_user.read_text() + "\nfrom ..wire.client import EndpointClient\n")
    assert upward_imports(module_imports(copy)) == [
        "quantcheck.fetch.collect -> quantcheck.lab.endpoint",
        "quantcheck.pipeline.ab -> quantcheck.wire.client",
        "quantcheck.store.files -> quantcheck.triage.pairs"]


def test_the_layer_map_is_read_from_the_development_docs() -> None:
    """The floors and the rules come from docs/development.md's table: every folder of
    the package is on it, and the rules its rows state are the ones enforced here."""
    assert {path.name for path in PACKAGE.iterdir()
            if (path / "__init__.py").exists()} <= set(FLOORS)
    assert FLOORS["store"] < FLOORS["triage"] == FLOORS["wire"] < FLOORS["fetch"] < \
        FLOORS["pipeline"] < FLOORS["cli"]
    assert LAYERS.never_imports == {"pipeline": {"wire"}}
    assert LAYERS.only_imported_by == {"lab": {"cli"}}
    assert {"store", "triage", "gate", "present"} <= LAYERS.offline
    assert not LAYERS.offline & {"wire", "fetch", "pipeline", "cli"}


def test_a_rule_written_in_the_map_is_enforced() -> None:
    """A row's rule changed in the docs changes what is refused: the map cannot drift
    from what is checked."""
    text = DEVELOPMENT.read_text(encoding="utf-8").replace(
        "Never imports `wire/`: it asks `fetch/` for a client",
        "Never imports `wire/`, never imports `gate/`")
    edited = read_layer_map(text)
    assert edited.never_imports["pipeline"] == {"wire", "gate"}
    assert any(" -> quantcheck.gate." in wrong
               for wrong in upward_imports(module_imports(), edited))


def test_no_module_imports_itself_through_others() -> None:
    edges = module_imports()
    circles = []

    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        for following in edges[start]:
            if following == goal or (following not in seen and reaches(following, goal,
                                                                        seen | {following})):
                return True
        return False

    for module in edges:
        if reaches(module, module, {module}):
            circles.append(module)
    assert not circles, f"modules in an import circle: {sorted(circles)}"


# --- one request builder ----------------------------------------------------------------

# Fields only a body sent to a server carries: written (a dict's key, an item set, a
# keyword of dict() or update()) only by the builder and the lab's servers.
SENT_FIELDS = {"max_tokens", "logprobs", "top_logprobs", "prompt_logprobs", "n_probs",
               "n_predict", "stream_options"}
REQUEST_BUILDER = "quantcheck.wire.requests"
# Records that name a sent field and are no body (by module name, as modules move): a
# prompt's own `max_tokens` where prompts are read and written (an entry, its file, an
# eval log's recorded request, the ladder's prompts) is the request the builder takes;
# an Inspect log names a stop reason so; a run's identity names its top-logprobs.
RECORDS_NAMING_A_FIELD = {
    "prompt_entries": {"max_tokens"}, "data_prompts": {"max_tokens"},
    "prompt_writer": {"max_tokens"}, "inspect_logs": {"max_tokens"},
    "lm_eval_samples": {"max_tokens"}, "ladder_plan": {"max_tokens"},
    "run_dir": {"top_logprobs"}}


def written_fields(tree: ast.AST) -> list[tuple[int, str]]:
    """Each SENT_FIELDS key a module writes, with its line."""
    found = []
    for node in ast.walk(tree):
        keys: list[ast.expr | None] = []
        if isinstance(node, ast.Dict):
            keys = list(node.keys)
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store):
            keys = [node.slice]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name | ast.Attribute) \
                and (node.func.id if isinstance(node.func, ast.Name) else node.func.attr) \
                in ("dict", "update"):
            found += [(node.lineno, k.arg) for k in node.keywords if k.arg in SENT_FIELDS]
        found += [(key.lineno, key.value) for key in keys if isinstance(key, ast.Constant)
                  and key.value in SENT_FIELDS]
    return found


def bodies_built_outside_the_builder(package: Path = PACKAGE) -> list[str]:
    """`module:line field` for each sent field written outside the request builder and
    the lab (the records that name one aside)."""
    found = []
    for path in sorted(package.rglob("*.py")):
        module = ".".join(("quantcheck", *path.relative_to(package).with_suffix("").parts))
        if module == REQUEST_BUILDER or room(module) == "lab":
            continue
        for line, key in written_fields(ast.parse(path.read_text(encoding="utf-8"))):
            if key not in RECORDS_NAMING_A_FIELD.get(path.stem, set()):
                found.append(f"{module}:{line} {key}")
    return found


def test_every_request_body_is_built_by_the_one_builder() -> None:
    assert bodies_built_outside_the_builder() == [], (
        "a request body is assembled outside src/quantcheck/wire/requests.py: build it "
        "there (one function per kind of request), so each engine's quirks are applied once")


def test_a_body_built_elsewhere_is_found(tmp_path: Path) -> None:
    copy = tmp_path / "quantcheck"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    for name, line in (("fetch/judging.py", 'BODY = {"model": "m", "max_tokens": 1}'),
                       ("fetch/collect.py", 'def ask(body: dict) -> None:\n'
                                            '    body["top_logprobs"] = 5'),
                       ("store/inputs/prompt_entries.py", 'FIELDS = dict(logprobs=True)')):
        path = copy / name
        path.write_text(path.read_text() + f"\n\n{line}\n")
    found = bodies_built_outside_the_builder(copy)
    assert [entry.split(":")[0] + " " + entry.split()[-1] for entry in found] == [
        "quantcheck.fetch.collect top_logprobs", "quantcheck.fetch.judging max_tokens",
        "quantcheck.store.inputs.prompt_entries logprobs"]


# The review server serves the sheet on 127.0.0.1 (aiohttp's server); it never sends.
OFFLINE_MODULES = sorted(module for module in module_imports()
                         if module.count(".") >= 2 and room(module) in LAYERS.offline
                         and module != "quantcheck.present.review_server")


def test_offline_layers_never_load_the_network() -> None:
    probe = (f"import sys, json, importlib\n"
             f"for name in {OFFLINE_MODULES!r}:\n"
             f"    importlib.import_module(name)\n"
             f"offline = [m for m in {NETWORK!r} if m in sys.modules]\n"
             f"importlib.import_module('quantcheck.present.review_server')\n"
             f"print(json.dumps([offline, [m for m in sys.modules if '.wire' in m]]))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=60, check=True)
    assert len(OFFLINE_MODULES) > 30
    assert json.loads(done.stdout) == [[], []]


def test_importing_the_package_loads_neither_pandas_nor_the_network() -> None:
    probe = ("import sys, json, quantcheck; quantcheck.__version__; "
             "print(json.dumps([m for m in ('pandas', 'aiohttp', 'quantcheck.wire.client') "
             "if m in sys.modules]))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=60, check=True)
    assert json.loads(done.stdout) == []
    import quantcheck

    # loaded on first use
    assert quantcheck.load_run.__module__ == "quantcheck.store.folders.run_dir"


def test_the_command_line_starts_without_the_table_schema_and_template_libraries() -> None:
    """Every command loads on `quantcheck ...`; pandas (and pyarrow), jsonschema and
    jinja2 load where a frame is made, a schema checked, a page rendered: a third of
    `quantcheck collect`'s start-up before (bench/collect_throughput.py)."""
    probe = ("import sys, json, quantcheck.cli; print(json.dumps([m for m in ("
             "'pandas', 'pyarrow', 'jsonschema', 'jinja2') if m in sys.modules]))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=60, check=True)
    assert json.loads(done.stdout) == []


# --- one policy table: a gate limit is declared in gate/limits.py alone ------------------

LIMITS_FILE = PACKAGE / "gate" / "limits.py"


def limit_names() -> tuple[set[str], set[str]]:
    """The policy table's keys and the parts of its options' flags."""
    from quantcheck.gate.limits import LIMITS

    return ({limit.key for limit in LIMITS},
            {part for limit in LIMITS for part in limit.flag.split("/")})


def hand_written_limits(package: Path) -> list[str]:
    """Where a module of `package` other than the table declares a limit again: a field
    in `Policy`'s body, an option spelled with a limit's flag, a list (tuple, set, dict)
    of policy keys."""
    keys, flags = limit_names()
    found = []
    for path in sorted(package.rglob("*.py")):
        if path.name == LIMITS_FILE.name and path.parent.name == "gate":
            continue
        where = path.relative_to(package)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and node.name == "Policy":
                found += [f"{where}: Policy.{ast.unparse(field.target)}" for field in node.body
                          if isinstance(field, ast.AnnAssign | ast.Assign)]
            if isinstance(node, ast.Call) and ast.unparse(node.func).endswith("option"):
                spelled = {part for arg in node.args if isinstance(arg, ast.Constant)
                           and isinstance(arg.value, str) for part in arg.value.split("/")}
                found += [f"{where}: option {flag}" for flag in sorted(spelled & flags)]
            if isinstance(node, ast.List | ast.Tuple | ast.Set | ast.Dict):
                items = node.keys if isinstance(node, ast.Dict) else node.elts
                listed = [item.value for item in items if isinstance(item, ast.Constant)
                          and item.value in keys]
                found += [f"{where}: a list of {listed}"] if len(listed) > 1 else []
    return found


def test_one_policy_table_no_limit_is_written_by_hand() -> None:
    assert hand_written_limits(PACKAGE) == []


def test_a_limit_written_by_hand_is_found(tmp_path: Path) -> None:
    (tmp_path / "verdict.py").write_text(
        "class Policy:\n    max_factual_flips: int = 0\n")
    (tmp_path / "options.py").write_text(
        "import click\nx = click.option('--max-factual-flips', type=int)\n"
        "y = click.option('--confident-flips-only/--all-flips')\n")
    (tmp_path / "config.py").write_text("KEYS = ('max_factual_flips', 'require_review')\n")
    assert sorted(hand_written_limits(tmp_path)) == [
        "config.py: a list of ['max_factual_flips', 'require_review']",
        "options.py: option --all-flips", "options.py: option --confident-flips-only",
        "options.py: option --max-factual-flips", "verdict.py: Policy.max_factual_flips"]


def test_one_policy_table_policy_is_made_from_it() -> None:
    """`Policy` declares no field: the table's decorator makes one per row."""
    tree = ast.parse((PACKAGE / "gate" / "verdict.py").read_text(encoding="utf-8"))
    policy = next(node for node in tree.body
                  if isinstance(node, ast.ClassDef) and node.name == "Policy")
    assert [ast.unparse(d) for d in policy.decorator_list] == ["policy_fields"]


def test_one_policy_table_its_copies_are_made_from_it() -> None:
    """The shipped JSON Schema of a policy file and docs/gate.md's table of limits are
    what the table makes (`write_shipped()`; `markdown_table()` pasted)."""
    from quantcheck.gate.limits import markdown_table
    from quantcheck.gate.schemas import generated

    shipped = PACKAGE / "store" / "schemas" / "policy.schema.json"
    assert shipped.read_text(encoding="utf-8") == generated("policy"), \
        "run quantcheck.gate.schemas.write_shipped()"
    text = (PACKAGE.parents[1] / "docs" / "gate.md").read_text(encoding="utf-8")
    start = text.index("<!-- policy table: made from gate/limits.py -->\n")
    written = text[start:text.index("<!-- end of policy table -->")].splitlines()[1:]
    assert written == markdown_table(), "paste quantcheck.gate.limits.markdown_table()"


# --- the tests mirror the house ----------------------------------------------------------

TESTS = Path(__file__).parent
# Test files of a scenario across the layers rather than of one module; docs/development.md
# ("Tests") lists them too and says what each covers.
SCENARIOS = {"test_action.py", "test_docs.py", "test_engine_models.py", "test_exit_codes.py",
             "test_fuzz_triage.py", "test_fuzz_parsers.py", "test_hostile_servers.py",
             "test_lint.py", "test_llamacpp.py", "test_newcomer.py", "test_scale.py",
             "test_structure.py", "test_wire_formats.py", "test_worked_example.py"}
# Tests of a folder as a whole, test_<layer>_<topic>.py (none so far).
FOLDER_TOPICS: set[str] = set()


def module_tested(name: str) -> Path | None:
    """src/quantcheck/LAYER/MODULE.py for tests/test_LAYER_MODULE.py, if there is one."""
    layer, _, module = name.removeprefix("test_").removesuffix(".py").partition("_")
    if layer not in LAYER_FOLDERS or not module:
        return None
    # a module of a package inside the layer (store/folders/run_dir.py) keeps the layer's
    # name alone: test_store_run_dir.py (module names are unique in a layer)
    paths = [PACKAGE / layer / f"{module}.py", *sorted((PACKAGE / layer).glob(f"*/{module}.py"))]
    return next((path for path in paths if (path.parent / "__init__.py").is_file()
                 and path.is_file()), None)


def test_each_test_file_is_named_for_its_module_or_is_a_listed_scenario() -> None:
    files = {path.name for path in TESTS.glob("test_*.py")}
    unplaced = sorted(name for name in files - SCENARIOS - FOLDER_TOPICS
                      if not module_tested(name))
    assert not unplaced, (
        f"{unplaced}: name a test file test_<layer>_<module>.py for the module of "
        "src/quantcheck/<layer>/ it tests (a private one too: test_cli__group.py); a "
        "scenario across the layers goes in SCENARIOS here and in docs/development.md")
    assert SCENARIOS | FOLDER_TOPICS <= files, "listed, but no such test file"
    docs = (PACKAGE.parents[1] / "docs" / "development.md").read_text(encoding="utf-8")
    listed = set(re.findall(r"^\s*\| `(test_\w+\.py)` \|", docs.split("\n## Tests", 1)[1],
                            re.MULTILINE))
    assert listed == SCENARIOS, "docs/development.md's scenario table names other files"


def imports_of_test_files(folder: Path) -> list[str]:
    """Every import of a test file (tests/test_*.py) by a module of the tests folder."""
    found = []
    for path in sorted(folder.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                modules = [node.module] if node.module else [a.name for a in node.names]
                if not node.level:
                    modules = [m.removeprefix("tests.") for m in modules if m.startswith("tests.")]
            elif isinstance(node, ast.Import):
                modules = [a.name.removeprefix("tests.") for a in node.names
                           if a.name.startswith("tests.")]
            else:
                continue
            found += [f"{path.name} imports {module}" for module in modules
                      if module.split(".")[0].startswith("test_")]
    return found


def test_no_test_file_imports_another(tmp_path: Path) -> None:
    """What two test files share is in tests/helpers.py (re-exported by conftest.py)."""
    assert imports_of_test_files(TESTS) == []
    (tmp_path / "test_a.py").write_text("from .test_b import helper\nimport tests.test_c\n")
    (tmp_path / "conftest.py").write_text("from . import test_d\n")
    assert imports_of_test_files(tmp_path) == ["conftest.py imports test_d",
                                           "test_a.py imports test_b", "test_a.py imports test_c"]


def test_conftest_shares_every_helper() -> None:
    """A test file imports what it shares from `.conftest`: the fixtures' module
    re-exports every public name of tests/helpers.py."""
    helpers = ast.parse((TESTS / "helpers.py").read_text(encoding="utf-8"))
    defined = {node.name for node in helpers.body
               if isinstance(node, ast.FunctionDef | ast.ClassDef)}
    defined |= {target.id for node in helpers.body if isinstance(node, ast.Assign | ast.AnnAssign)
                for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
                if isinstance(target, ast.Name)}
    conftest = ast.parse((TESTS / "conftest.py").read_text(encoding="utf-8"))
    (exported,) = [ast.literal_eval(node.value) for node in conftest.body
                   if isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "__all__"]
    assert set(exported) == {name for name in defined if not name.startswith("_")}
