"""deploy/kubernetes/, checked without a cluster. The Kubernetes objects are validated by kubernetes-validate against
Kubernetes' own schemas, strictly (a field Kubernetes does not know is an error). kubernetes-validate has no schema
for a custom resource and only warns about one, so the Gateway API's and KubeRay's objects are validated against
deploy/kubernetes/schemas/ (the fields these manifests use, written from the projects' API references), the
RayService's pod templates against Kubernetes' own PodTemplate, and its serveConfigV2 against Ray Serve's schema.
Then what the files say of each other, of the Dockerfile, of the code and of the measurements is compared."""

import ast
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml
from kubernetes_validate import utils as kubernetes
from referencing import Registry, Resource

from tests.test_requirements import read_pip_file

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy" / "kubernetes"
SCHEMAS = DEPLOY / "schemas"
MANIFESTS = sorted(DEPLOY.glob("*.yaml"))
DATABASE = DEPLOY / "database.yaml"
KUBERNETES_VERSION = kubernetes.latest_version()  # the newest Kubernetes the pinned kubernetes-validate knows
CUSTOM = {("gateway.networking.k8s.io/v1", "Gateway"): "gateway.json",
          ("gateway.networking.k8s.io/v1", "HTTPRoute"): "httproute.json",
          ("ray.io/v1", "RayService"): "rayservice.json"}
REGISTRY = Registry().with_resources((path.name, Resource.from_contents(json.loads(path.read_text())))
                                     for path in SCHEMAS.glob("*.json"))
SERVE_PORT = 8000  # KubeRay's serve port, on the Service it names <RayService>-serve-svc


def documents(path: Path) -> list[dict]:
    return [document for document in yaml.safe_load_all(path.read_text()) if document]


def problems(document: dict) -> list[str]:
    """Every reason ``document`` would not be accepted, as sentences; [] when it would."""
    schema = CUSTOM.get((document.get("apiVersion"), document.get("kind")))
    if schema is None:
        return kubernetes_problems(document)
    validator = jsonschema.Draft202012Validator(json.loads((SCHEMAS / schema).read_text()), registry=REGISTRY)
    found = [f"{'.'.join(map(str, error.absolute_path))}: {error.message}" for error in validator.iter_errors(document)]
    if not found and document["kind"] == "RayService":
        found += ray_service_problems(document)
    return found


def kubernetes_problems(document: dict) -> list[str]:
    try:
        kubernetes.validate(document, KUBERNETES_VERSION, strict=True)
    except kubernetes.ValidationError as error:
        return [f"{'.'.join(map(str, error.path))}: {error.message}"]
    except kubernetes.SchemaNotFoundError as error:  # the command line only warns here, and exits 0
        return [error.message]
    return []


def ray_service_problems(service: dict) -> list[str]:
    """Its pod templates, as Kubernetes PodTemplates, and its Serve config, as Ray Serve reads it."""
    cluster = service["spec"]["rayClusterConfig"]
    groups = [("head", cluster["headGroupSpec"])] + [(group["groupName"], group)
                                                    for group in cluster.get("workerGroupSpecs", [])]
    found = [f"{name} template: {problem}" for name, group in groups
             for problem in kubernetes_problems({"apiVersion": "v1", "kind": "PodTemplate",
                                                 "metadata": {"name": name}, "template": group["template"]})]
    return found + serve_config_problems(service["spec"].get("serveConfigV2", ""))


def serve_config_problems(text: str) -> list[str]:
    """Ray Serve's own schema; it lets unknown keys through (to read newer configs), so a misspelt key is caught
    here by comparing the keys with its fields."""
    import pydantic
    from ray.serve.schema import DeploymentSchema, RayActorOptionsSchema, ServeApplicationSchema, ServeDeploySchema

    config = yaml.safe_load(text)
    try:
        ServeDeploySchema.model_validate(config)
    except pydantic.ValidationError as error:
        return [f"serveConfigV2: {error}"]
    found = unknown_keys("serveConfigV2", config, ServeDeploySchema)
    for app in config["applications"]:
        found += unknown_keys(f"application {app['name']}", app, ServeApplicationSchema)
        if not app.get("route_prefix", "/").startswith("/"):
            found.append(f"application {app['name']}: route_prefix must start with /")
        for deployment in app.get("deployments", []):
            where = f"deployment {deployment.get('name')}"
            found += unknown_keys(where, deployment, DeploymentSchema)
            found += unknown_keys(where, deployment.get("ray_actor_options", {}), RayActorOptionsSchema)
    return found


def unknown_keys(where: str, data: dict, model) -> list[str]:
    unknown = sorted(set(data) - set(model.model_fields))
    return [f"{where}: {key!r} is not a field of {model.__name__}" for key in unknown]


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda path: path.name)
def test_every_manifest_would_be_accepted(path):
    found = documents(path)
    assert found, path
    for document in found:
        assert problems(document) == [], f"{path.name}: {document['kind']}"


BROKEN = [  # (file, text, what it becomes): each a mistake one of the checks above must catch
    ("app.yaml", "readinessProbe:", "readynessProbe:"),  # a field Kubernetes does not know
    ("app.yaml", "replicas: 2", "replicas: two"),  # the wrong type
    ("gateway.yaml", "sessionPersistence:", "sessionPersistance:"),
    ("gateway.yaml", "lifetimeType: Session", "lifetimeType: Forever"),  # not one of its values
    ("gateway.yaml", "gatewayClassName: eg", "gatewayClass: eg"),  # and a required field missing
    ("rayservice.yaml", 'num-cpus: "0"', "num-cpus: 0"),  # ray start's options are strings
    ("rayservice.yaml", "              - name: ray-worker", "              - nme: ray-worker"),  # in a pod template
    ("rayservice.yaml", "import_path:", "import_pth:"),  # in the Serve config
    ("rayservice.yaml", "num_cpus: 2", "num_cpu: 2"),
]


@pytest.mark.parametrize(("name", "text", "mistake"), BROKEN, ids=[mistake for _, _, mistake in BROKEN])
def test_a_copy_with_a_mistake_is_refused(tmp_path, name, text, mistake):
    source = (DEPLOY / name).read_text()
    assert source.count(text) == 1, text
    (tmp_path / name).write_text(source.replace(text, mistake))
    assert any(problems(document) for document in documents(tmp_path / name))


def command_line(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kubernetes_validate", *args], capture_output=True, text=True,
                          timeout=120)


def test_the_command_line_refuses_a_wrong_field_but_lets_a_custom_resource_through(tmp_path):
    """Why the custom resources need their own schemas: `kubernetes-validate --strict` fails a misspelt field
    of a Deployment, and passes a Gateway or a RayService, whatever it holds, with a warning."""
    assert command_line("--strict", str(DEPLOY / "app.yaml")).returncode == 0
    broken = tmp_path / "app.yaml"
    broken.write_text((DEPLOY / "app.yaml").read_text().replace("readinessProbe:", "readynessProbe:"))
    refused = command_line("--strict", str(broken))
    assert refused.returncode == 1 and "readynessProbe" in refused.stdout
    passed = command_line("--strict", str(DEPLOY / "gateway.yaml"), str(DEPLOY / "rayservice.yaml"))
    assert passed.returncode == 0 and passed.stdout.count("Couldn't find schema") == 3, passed.stdout


def objects() -> dict[str, dict]:
    """Every manifest's objects by kind (each kind appears once), the live class's database apart."""
    found = [document for path in MANIFESTS if path != DATABASE for document in documents(path)]
    by_kind = {document["kind"]: document for document in found}
    assert len(by_kind) == len(found)
    return by_kind


def container(kind: str) -> dict:
    return objects()[kind]["spec"]["template"]["spec"]["containers"][0]


def environment() -> dict[str, str]:
    """The replicas' settings written in the manifest (a Secret's are read with secret_settings)."""
    return {variable["name"]: variable["value"] for variable in container("Deployment")["env"] if "value" in variable}


def secret_settings() -> dict[str, tuple[str, str]]:
    """The replicas' settings taken from a Secret: name -> (the Secret, its key)."""
    found = {}
    for variable in container("Deployment")["env"]:
        if "valueFrom" in variable:
            reference = variable["valueFrom"]["secretKeyRef"]
            found[variable["name"]] = (reference["name"], reference["key"])
    return found


def test_the_replicas_share_the_live_class_database_the_manifest_serves():
    """LMVIZ_LIVE_DB comes from the Secret database.yaml says how to make, whose URL names its Service, user and
    database; its PostgreSQL keeps its data on a volume of its own."""
    by_kind = {document["kind"]: document for document in documents(DATABASE)}
    assert secret_settings()["LMVIZ_LIVE_DB"] == ("lmviz-live-db", "url")
    comment = DATABASE.read_text()
    made = re.search(r"--from-literal=url=postgresql://(\w+):PASSWORD@([\w-]+):(\d+)/(\w+)", comment)
    assert made, "database.yaml's comment says how to make the Secret"
    user, host, port, database = made.groups()
    service = by_kind["Service"]
    assert (host, int(port)) == (service["metadata"]["name"], service["spec"]["ports"][0]["port"])
    postgres = by_kind["StatefulSet"]["spec"]["template"]["spec"]["containers"][0]
    settings = {variable["name"]: variable.get("value") for variable in postgres["env"]}
    assert (settings["POSTGRES_USER"], settings["POSTGRES_DB"]) == (user, database)
    assert service["spec"]["selector"] == by_kind["StatefulSet"]["spec"]["template"]["metadata"]["labels"]
    assert by_kind["StatefulSet"]["spec"]["volumeClaimTemplates"][0]["metadata"]["name"] == \
        postgres["volumeMounts"][0]["name"]


def serve_config() -> dict:
    return yaml.safe_load(objects()["RayService"]["spec"]["serveConfigV2"])


def test_the_route_reaches_the_service_and_the_service_the_replicas_with_cookie_affinity():
    kinds = objects()
    deployment, service, route = kinds["Deployment"], kinds["Service"], kinds["HTTPRoute"]
    assert deployment["spec"]["replicas"] == 2
    assert service["spec"]["selector"] == deployment["spec"]["template"]["metadata"]["labels"]
    [port] = service["spec"]["ports"]
    assert port["targetPort"] in {p["name"] for p in container("Deployment")["ports"]}
    assert port["appProtocol"] == "kubernetes.io/ws"  # Streamlit's /_stcore/stream is a WebSocket
    [rule] = route["spec"]["rules"]
    assert [(ref["name"], ref["port"]) for ref in rule["backendRefs"]] == [(service["metadata"]["name"], port["port"])]
    assert [ref["name"] for ref in route["spec"]["parentRefs"]] == [kinds["Gateway"]["metadata"]["name"]]
    assert rule["matches"] == [{"path": {"type": "PathPrefix", "value": "/"}}]  # the cookie's Path is /
    assert rule["sessionPersistence"]["type"] == "Cookie"


def test_the_replicas_run_the_dockerfiles_server_and_probe_its_health_check():
    dockerfile = (ROOT / "Dockerfile").read_text()
    port = int(re.search(r"^EXPOSE (\d+)$", dockerfile, re.M)[1])
    health = re.search(r"HEALTHCHECK.*?(/_stcore/health)", dockerfile, re.S)[1]
    app = container("Deployment")
    named = {p["name"]: p["containerPort"] for p in app["ports"]}
    assert list(named.values()) == [port] and f"PORT={port}" in dockerfile
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert app[probe]["httpGet"]["path"] == health and named[app[probe]["httpGet"]["port"]] == port, probe


def test_the_replicas_settings_are_ones_the_code_reads_and_ask_for_what_the_scorer_serves(monkeypatch):
    from lmviz.models import settings
    from lmviz.models.loading import DEFAULT_MODEL

    read = set()
    for path in (ROOT / "lmviz").rglob("*.py"):
        read |= set(re.findall(r"\"(LMVIZ_[A-Z_]+)\"", path.read_text()))
    env = environment()
    assert {name for name in [*env, *secret_settings()] if name.startswith("LMVIZ_")} <= read
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert DEFAULT_MODEL in settings.allowed_models()
    # the scorer serves its default, and refuses a replica that asks for another dtype
    assert settings.default_dtype() == scorer_init_default("dtype")


def scorer_module() -> tuple[str, ast.Module]:
    [app] = serve_config()["applications"]
    module, attribute = app["import_path"].split(":")
    path = ROOT.joinpath(*module.split(".")).with_suffix(".py")
    return attribute, ast.parse(path.read_text())


def scorer_init_default(argument: str):
    _, tree = scorer_module()
    [deployment] = serve_config()["applications"][0]["deployments"]
    scorer = next(node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == deployment["name"])
    init = next(node for node in scorer.body if isinstance(node, ast.FunctionDef) and node.name == "__init__")
    names = [arg.arg for arg in init.args.args][-len(init.args.defaults):]
    return ast.literal_eval(init.args.defaults[names.index(argument)])


def test_the_serve_config_names_the_scorers_application_and_deployment():
    attribute, tree = scorer_module()
    top_level = {target.id for node in tree.body if isinstance(node, ast.Assign) for target in node.targets
                 if isinstance(target, ast.Name)}
    assert attribute in top_level, f"lmviz/serving/ray_scorer.py defines no {attribute}"
    deployments = {node.name for node in tree.body if isinstance(node, ast.ClassDef)
                   and any("serve.deployment" in ast.unparse(decorator) for decorator in node.decorator_list)}
    [app] = serve_config()["applications"]
    assert {deployment["name"] for deployment in app["deployments"]} <= deployments


def test_the_replicas_reach_the_scorer_through_kuberays_serve_service():
    [app] = serve_config()["applications"]
    name = objects()["RayService"]["metadata"]["name"]
    assert environment()["LMVIZ_SCORER_URL"] == f"http://{name}-serve-svc:{SERVE_PORT}{app['route_prefix']}"


def test_the_scorer_image_is_lmviz_with_the_ray_the_requirements_pin():
    dockerfile = (DEPLOY / "scorer.Dockerfile").read_text()
    ray = str(read_pip_file(ROOT / "requirements-dev.txt")[0]["ray"])
    cluster = objects()["RayService"]["spec"]["rayClusterConfig"]
    assert cluster["rayVersion"] == ray
    assert re.findall(r"ray\[serve\]==([\d.]+)", dockerfile) == [ray]
    assert re.search(r"^FROM (\S+)$", dockerfile, re.M)[1] == container("Deployment")["image"]
    built = re.search(r"docker build -t (\S+) -f deploy/kubernetes/scorer.Dockerfile", dockerfile)[1]
    images = {c["image"] for group in [cluster["headGroupSpec"], *cluster["workerGroupSpecs"]]
              for c in group["template"]["spec"]["containers"]}
    assert images == {built}


def test_the_scorer_dockerfile_passes_hadolint():
    hadolint = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    done = subprocess.run([hadolint, "--no-color", str(DEPLOY / "scorer.Dockerfile")], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_figure_the_manifests_quote_is_in_the_measurements():
    measurements = (ROOT / "docs" / "development" / "measurements.md").read_text()
    quoted = [figure for path in MANIFESTS for figure in re.findall(r"\b\d[\d ]* MB\b", path.read_text())]
    assert len(quoted) >= 5
    assert [figure for figure in quoted if figure not in measurements] == []
