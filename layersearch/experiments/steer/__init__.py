"""SD²'s experiment in one place: ``experiment`` (train, then bench the steered drafter) and
``workflow`` (the steps of ``layersearch steer``)."""
