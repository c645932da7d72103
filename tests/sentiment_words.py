"""The words of the tests' generated sentiment data: a label is carried by one GOOD or BAD word among FILLER."""
GOOD, BAD = ["good", "great", "fine", "superb"], ["bad", "awful", "poor", "dull"]
FILLER = "the a movie film plot actors story was is and it this".split()
