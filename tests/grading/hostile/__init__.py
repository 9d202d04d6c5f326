"""The hostile and broken submissions the grader must survive (built by ``corpus.build``)."""
