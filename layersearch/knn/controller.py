"""KNN-SSD's routing as a decode-loop controller: one choice per input, right after the prefill.

:class:`KnnController` asks the loop for the prefill's last hidden states
(``wants_prompt_hidden``), averages them over the prompt, routes that vector with a
:class:`~layersearch.knn.router.Router` and answers with the chosen domain's mask for the whole
generation. The choice (domain, distance, fallback) lands in ``stats.selections``; the routes of
every generation so far stay in :attr:`KnnController.routes` for benchmarks. The controller only
picks a mask, so the output is the target's own for every route.
"""

from __future__ import annotations

from layersearch.knn.represent import mean_representation
from layersearch.knn.router import Route, Router
from layersearch.runtime.step import Controller, DecodeView, Selection


class KnnController(Controller):
    """Routes each input once, at step 0, by 1-NN cosine over the router's anchors."""

    wants_prompt_hidden = True

    def __init__(self, router: Router) -> None:
        self.router = router
        self.routes: list[Route] = []

    def select(self, view: DecodeView) -> Selection | None:
        """At step 0: the routed mask (fallback beyond the threshold); nothing afterwards."""
        if view.step != 0:
            return None
        if view.prompt_hidden is None:  # a loop that ignores wants_prompt_hidden: fail loudly, not silently plain
            raise RuntimeError("KnnController needs the prefill's hidden states (DecodeView.prompt_hidden)")
        route = self.router.route(mean_representation(view.prompt_hidden))  # prompt_hidden [n, d]
        self.routes.append(route)
        return Selection(route.mask, None, route.record())

