"""What SGLang's forkserver imports before it forks SGLang's processes (`forkserver.py`): the
scheduler's and the detokenizer's modules and every model class SGLang's registry would import
in the scheduler, with this node's SGLang plugin; its notices kept at debug as in each process."""

from server.engines.sglang import notices, plugin

notices.install()

from sglang.srt.managers import detokenizer_manager, scheduler  # noqa: E402
from sglang.srt.models.registry import ModelRegistry  # noqa: E402

ModelRegistry.get_supported_archs()  # imports the model modules, once for every process forked
__all__ = ["detokenizer_manager", "plugin", "scheduler"]
