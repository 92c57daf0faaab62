"""Grading past one machine: shards of a class and their merge, and the hosted graders' contracts
(Gradescope, PrairieLearn)."""
