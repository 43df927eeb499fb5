"""pip install ./python: builds nexus._native with the project's CMake (libnexus only: no
LibTorch, no daemon) in pip's build folder, and packages it with the pure-Python modules.
The set-up's own route is different and needs no pip: a .pth file in the venv points at
build/release/python (docs/design/python.md)."""
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent


class BuildExtensionWithCMake(build_py):
    def run(self):
        super().run()  # the .py, .pyi and py.typed files
        with tempfile.TemporaryDirectory(prefix="nexus-pip-build-") as tmp:  # never in the source tree
            self._build_extension(pathlib.Path(tmp))

    def _build_extension(self, build_dir):
        configure = ["cmake", "-S", str(ROOT), "-B", str(build_dir), "-G", "Ninja",
                     "-DCMAKE_BUILD_TYPE=RelWithDebInfo", "-DNEXUS_WITH_MODEL=OFF", "-DNEXUS_WITH_CUDA=OFF",
                     "-DNEXUS_BUILD_TESTS=OFF", "-DNEXUS_PYTHON=ON", f"-DPython_EXECUTABLE={sys.executable}"]
        subprocess.run(configure, check=True)
        subprocess.run(["cmake", "--build", str(build_dir), "--target", "nexus_python"], check=True)
        built = list((build_dir / "python" / "nexus").glob("_native*.so"))
        if len(built) != 1:
            raise RuntimeError(f"the CMake build made {built}, not one nexus._native")
        target = pathlib.Path(self.build_lib) / "nexus"
        target.mkdir(parents=True, exist_ok=True)
        shutil.copy2(built[0], target / built[0].name)


class PlatformDistribution(Distribution):
    def has_ext_modules(self):  # the wheel holds a compiled module: tag it for this platform
        return True


os.chdir(HERE)
# setuptools' own build and egg-info folders go to /tmp too, not into the clone.
scratch = tempfile.mkdtemp(prefix="nexus-pip-")
setup(packages=["nexus"], package_data={"nexus": ["*.pyi", "py.typed"]},
      cmdclass={"build_py": BuildExtensionWithCMake}, distclass=PlatformDistribution,
      options={"build": {"build_base": scratch}, "egg_info": {"egg_base": scratch}})
