"""What a notebook's cells call besides the lesson: its parameter check (`params.Notebook`, made in each notebook's
first cell) and its figures (`plots`)."""
