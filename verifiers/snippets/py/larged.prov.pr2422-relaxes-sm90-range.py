def kb_accepts_sm90(hd, hdv):
    try:
        _validate_head_dims(hd, hdv, 9, 8)
        return True
    except AssertionError:
        return False
