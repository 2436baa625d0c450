"""ddlsc_tf: Deep Discriminative Latent Space for Clustering, TF2 / Keras 3."""

import pathlib

import setuptools

HERE = pathlib.Path(__file__).parent
REQUIREMENTS = [
    line.strip() for line in (HERE / "requirements.txt").read_text().splitlines()
    if line.strip() and not line.startswith("#")
]

setuptools.setup(
    name="ddlsc_tf",
    version="1.0.0",
    description=("Deep Discriminative Latent Space for Clustering "
                 "(Tzoreff, Kogan, Choukroun 2018) in TensorFlow 2 / Keras 3"),
    long_description=(HERE / "README.md").read_text(),
    long_description_content_type="text/markdown",
    packages=setuptools.find_packages(include=["ddlsc_tf", "ddlsc_tf.*",
                                               "experiments"]),
    python_requires=">=3.10",
    install_requires=REQUIREMENTS,
    # tfds.testing (DatasetBuilderTestCase) imports dill.
    # pytest-xdist: the README's test command runs on two workers (a single
    # pytest process kept one of CI's two cores idle).
    extras_require={"test": ["pytest>=8", "pytest-xdist>=3", "dill"]},
)
