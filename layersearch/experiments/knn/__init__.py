"""KNN-SSD's experiment in one place: ``experiment`` (fit the router, bench it), ``workflow`` (the
steps of ``layersearch knn``), ``figures`` (its pictures)."""
