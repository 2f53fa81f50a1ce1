# The shared scorer's image (rayservice.yaml): lmviz's own image with Ray Serve added.
#   docker build -t lmviz . && docker build -t lmviz-scorer -f deploy/kubernetes/scorer.Dockerfile .
# The base is the image just built from this checkout, not a registry's, so it has no version tag.
# hadolint ignore=DL3006
FROM lmviz

# The users by name, as the base image's /etc/passwd resolves them; Kubernetes gets the number from the
# manifests' runAsUser.
# hadolint ignore=DL3066
USER root
# KubeRay's readiness probes for a RayService's workers run wget in the container; python:3.11-slim has none,
# and Debian's wget of the base image's release is the one to take (no version pinned).
# Ray's version is requirements-dev.txt's pin and rayservice.yaml's rayVersion (tests/test_deploy.py checks both).
# hadolint ignore=DL3008
RUN apt-get update && apt-get install -y --no-install-recommends wget && rm -rf /var/lib/apt/lists/* \
    && pip install --no-cache-dir "ray[serve]==2.60.0"
# hadolint ignore=DL3066
USER lmviz
# Ray's workers import lmviz.serving.ray_scorer from the checkout the base image copied to /app.
ENV PYTHONPATH=/app
