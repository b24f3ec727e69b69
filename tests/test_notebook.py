"""notebooks/quickstart.ipynb runs top to bottom (nbclient, this interpreter's kernel), offline, on the testbed."""

import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(__file__))
NOTEBOOK = os.path.join(ROOT, "notebooks", "quickstart.ipynb")


def test_quickstart_notebook_executes(tmp_path, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    from jupyter_client.kernelspec import KernelSpecManager

    spec = KernelSpecManager().get_kernel_spec("python3")
    assert os.path.realpath(spec.argv[0]) == os.path.realpath(sys.executable) or spec.argv[0] == "python", spec.argv
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("PYTHONPATH", ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}})
    client.execute()
    outputs = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
    assert "# " in outputs and "entropy_bonus" in outputs  # the printed model card
    assert "Offline: set HF_TOKEN" in outputs  # the Hub cell is guarded
    assert (tmp_path / "quickstart-run" / "entropy_curves.png").exists()
    images = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if "image/png" in o.get("data", {})]
    assert images, "the entropy plot was not rendered"
