"""Search strategies (siblings behind one interface, ``base.Strategy``): random, ansor, felix."""
