"""Built-in tasks, one file each: generator, prompt, agent/env or workflow, reward binding."""
