def kb_attrs_with_prefix(obj, prefix):
    """kb's helper: the attribute names of obj that start with prefix."""
    return [k for k in vars(obj) if k.startswith(prefix)]
