"""The files a run reads, off the reading path: a model folder (where it is, its config, weights and tokenizer),
where a preset's data is (a variable, the repository's `data/`, the hub), a run's own files, and each file format
read strictly, one line naming the file and place of the first problem. The lesson says what is done with what they
read: `model/weights.py` maps the tensors, the families in `tasks/` say what an example is and how it is scored."""
