"""Schedule search: sketches (Ansor's derivation rules), random annotation, measurers, the
static cost model. ``print(minicomp.search.sketches(task))`` shows a task's sketches."""
from minicomp.search.sketch import generate_sketches, register_rule, sketches

__all__ = ["generate_sketches", "register_rule", "sketches"]
