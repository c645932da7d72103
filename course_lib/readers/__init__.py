"""The files a task preset reads, off the reading path: where a preset's data is (a variable, the repository's `data/`,
the hub), a run's own files, and the presets defined by their files (custom CSV/TSV/JSONL, SST-5, ANLI, ..., the
CS224N project's). The task families in `tasks/` say what an example is and how it is scored."""
