"""rLLM v0.2's `rllm.tools.code_tools`: the python tool (`PythonInterpreter`, over rllm's sandbox) and its base
classes. rLLM's other backends (E2B, Together, LiveCodeBench's local runner) are not here: rllm runs code in its own
sandbox only, `PythonInterpreter(backend="local")`."""

from rllm.compat.tools.code_tools.code_tool import CodeTool, CodeToolOutput
from rllm.compat.tools.code_tools.python_interpreter import PythonInterpreter

__all__ = ["CodeTool", "CodeToolOutput", "PythonInterpreter"]
