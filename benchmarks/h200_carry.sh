#!/usr/bin/env bash
# Build .carry/ (git-ignored through .git/info/exclude) for benchmarks/h200_session.sh: the
# nbgrader 0.9.6 wheels the H200 image lacks (cp312, about 36 MB) and bubblewrap's .deb.
# Run here, from the repository root, before a device call that names .carry in `carry`.
set -euo pipefail
grep -qx "/.carry/" .git/info/exclude 2>/dev/null || echo "/.carry/" >> .git/info/exclude
rm -rf .carry && mkdir -p .carry/whl .carry/deb
.venv/bin/python -m pip download --quiet --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform any -d .carry/whl nbgrader==0.9.6 ipykernel
# what the image already has (its package list: the device tool's KINDS.md) or grading never
# imports (JupyterLab, the notebook app, widgets)
cd .carry/whl
for name in jupyterlab-4 jupyterlab_server notebook-7 notebook_shim jupyter_lsp async_lru babel \
    ipywidgets jupyterlab_widgets widgetsnbextension jupyter_builder anyio attrs certifi \
    charset_normalizer h11 httpcore httpx idna jinja2 MarkupSafe markupsafe packaging \
    prometheus_client psutil pygments python_dateutil PyYAML pyyaml requests setuptools six \
    typing_extensions urllib3 json5; do
  rm -f "$name"*.whl
done
cd ../deb && apt-get download bubblewrap libcap2 2>/dev/null
cd ../.. && du -sh .carry
